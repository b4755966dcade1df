import { Module } from '@nestjs/common';
import { WebSearchService } from './web-search.service';

/** The `web_search` tool's backends; needs the global ConfigModule. */
@Module({
  providers: [WebSearchService],
  exports: [WebSearchService],
})
export class WebSearchModule {}
