import { Module } from '@nestjs/common';
import { ModelsService } from './models.service';

/** The model catalog and its prices, for every module that needs them. */
@Module({
  providers: [ModelsService],
  exports: [ModelsService],
})
export class ModelsModule {}
