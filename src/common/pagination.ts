import { ApiProperty } from '@nestjs/swagger';
import { OptionalInt, OptionalUuid } from './validation/decorators';

/** Cursor pagination as in the OpenAI API: `limit` and `starting_after` (the last id seen). */
export class PageQueryDto {
  @OptionalInt({ min: 1, max: 100, default: 20, description: 'Number of items to return, 1 to 100.' })
  limit?: number;

  @OptionalUuid('Return the items after this id (the `next_cursor` of the previous page).')
  starting_after?: string;
}

export interface Page<T> {
  data: T[];
  has_more: boolean;
  next_cursor: string | null;
}

/** Builds a page from `limit + 1` fetched rows: the extra row only tells whether more exist. */
export function toPage<T extends { id: string }>(rows: T[], limit: number): Page<T> {
  const data = rows.slice(0, limit);
  const hasMore = rows.length > limit;
  return { data, has_more: hasMore, next_cursor: hasMore ? data[data.length - 1].id : null };
}

export class PageMetaDto {
  @ApiProperty({ description: 'Whether more items follow this page.', example: false })
  has_more: boolean;

  @ApiProperty({
    type: String,
    nullable: true,
    description: 'Pass as `starting_after` to get the next page; null on the last page.',
    example: null,
  })
  next_cursor: string | null;
}
