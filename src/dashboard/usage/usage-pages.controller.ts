import { Get, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { AssistantsService } from '../../assistants/assistants.service';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { UsageExplorerService } from '../../usage/usage-explorer.service';
import { UsageStatsService } from '../../usage/usage-stats.service';
import { queryString } from '../billing/billing-form';
import { sendCsv } from '../csv';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import { formatDateTime, formatMillicents } from '../format';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors } from '../sessions';
import { allowedPeriods, dailyChartRow, lastDays, periodDays, readRequestsQuery, RequestsQuery, requestsQueryOf } from './usage-query';
import { ApiKeysService } from '../../workspaces/api-keys.service';

/** Requests per page of the recent requests. */
const REQUESTS_PAGE_SIZE = 50;

/**
 * Usage: the period's summary and cost per model (GET /v1/usage), a daily chart with the
 * same numbers in a table (GET /v1/usage/daily), and the recent requests
 * (GET /v1/usage/recent) with filters, pages and CSV exports. The figures come from the
 * same services as the API's: the daily totals and indexed keyset reads, never a scan.
 */
@DashboardController('w/:workspaceId/usage')
export class UsagePagesController {
  constructor(
    private readonly pages: PagesService,
    private readonly stats: UsageStatsService,
    private readonly explorer: UsageExplorerService,
    private readonly assistants: AssistantsService,
    private readonly apiKeys: ApiKeysService,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  @Get()
  @RequireRole('member')
  async summary(@Req() req: PageRequest, @Res() res: Response, @Query('days') daysAsked: unknown, @Query('key') keyAsked: unknown): Promise<void> {
    const workspaceId = req.member!.id;
    const days = periodDays(daysAsked, this.config.usageRetentionDays);
    const period = this.stats.period(lastDays(days));
    const keys = await this.apiKeys.list(workspaceId);
    // A key of this workspace, or all of them: anything else is no filter.
    const key = keys.find((candidate) => candidate.id === keyAsked);
    const [summary, daily] = await Promise.all([this.stats.summary(workspaceId, period, key?.id), this.stats.daily(workspaceId, period, key?.id)]);
    const usage = `/w/${workspaceId}/usage`;
    const keyLabel = (id: string | null, name: string | null) =>
      id === null ? 'No key (widget, playground)' : (name ?? `${keys.find((candidate) => candidate.id === id)?.displayPrefix ?? 'deleted key'}…`);
    await this.pages.render(req, res, 'usage', {
      days,
      periods: allowedPeriods(this.config.usageRetentionDays).map((value) => ({
        days: value,
        href: `${usage}${queryString({ days: value === 30 ? undefined : String(value), key: key?.id })}`,
      })),
      keys: keys.map((candidate) => ({ id: candidate.id, label: keyLabel(candidate.id, candidate.name) })),
      key: key?.id ?? '',
      byKey: summary.by_api_key.map((row) => ({
        label: keyLabel(row.api_key_id, row.api_key_name),
        requests: row.requests.toLocaleString('en-US'),
        cost: formatMillicents(row.cost_millicents),
        href: row.api_key_id && `${usage}/requests${queryString({ key: row.api_key_id, from: period.startDate, to: period.endDate })}`,
      })),
      period: { start: period.startDate, end: period.endDate },
      totals: {
        requests: summary.summary.total_requests.toLocaleString('en-US'),
        tokens: summary.summary.total_tokens.toLocaleString('en-US'),
        cost: formatMillicents(summary.summary.total_cost_millicents),
        latency: `${Math.round(summary.summary.average_latency_ms).toLocaleString('en-US')} ms`,
      },
      empty: summary.summary.total_requests === 0,
      byModel: summary.by_model.map((row) => ({
        model: row.model,
        requests: row.requests.toLocaleString('en-US'),
        cost: formatMillicents(row.cost_millicents),
        href: `${usage}/requests${queryString({ model: row.model, key: key?.id, from: period.startDate, to: period.endDate })}`,
      })),
      daily: daily.map((row) => dailyChartRow({ ...row, costMillicents: row.cost_millicents })),
      dailyCsvHref: `${usage}/daily.csv${queryString({ days: String(days), key: key?.id })}`,
    });
  }

  /** The daily table as CSV: the numbers of GET /v1/usage/daily for the period, exact costs in millicents. */
  @Get('daily.csv')
  @RequireRole('member')
  async dailyCsv(@Req() req: PageRequest, @Res() res: Response, @Query('days') daysAsked: unknown, @Query('key') keyAsked: unknown): Promise<void> {
    const days = periodDays(daysAsked, this.config.usageRetentionDays);
    const key = (await this.apiKeys.list(req.member!.id)).find((candidate) => candidate.id === keyAsked);
    const daily = await this.stats.daily(req.member!.id, this.stats.period(lastDays(days)), key?.id);
    await sendCsv(res, `usage-daily-${days}d.csv`, ['date', 'requests', 'tokens', 'cost_millicents'], toAsync(daily), (row) => [
      row.date,
      row.requests,
      row.tokens,
      row.cost_millicents,
    ]);
  }

  @Get('requests')
  @RequireRole('member')
  async requests(@Req() req: PageRequest, @Res() res: Response, @Query() rawQuery: Record<string, unknown>): Promise<void> {
    const workspaceId = req.member!.id;
    const query = requestsQueryOf(rawQuery);
    const read = readRequestsQuery(query);
    const errors: Partial<Record<keyof RequestsQuery, string>> = read.ok ? {} : read.errors;
    let page = { data: [] as Awaited<ReturnType<UsageExplorerService['page']>>['data'], has_more: false, next_cursor: null as string | null };
    if (read.ok) {
      try {
        page = await this.explorer.page(workspaceId, read.filter, { limit: REQUESTS_PAGE_SIZE, startingAfter: read.startingAfter });
      } catch (error) {
        errors.after = formErrors(error).starting_after ?? 'That page link is broken.';
      }
    }
    const [assistants, keys, models] = await Promise.all([
      this.assistants.list(workspaceId),
      this.apiKeys.list(workspaceId),
      this.explorer.modelsUsed(workspaceId, lastDays(this.config.usageRetentionDays).start_date),
    ]);
    if (query.model && !models.includes(query.model)) models.push(query.model);
    const names = new Map(assistants.map((assistant) => [assistant.id, assistant.name]));
    const keyNames = new Map(keys.map((key) => [key.id, key.name ?? `${key.displayPrefix}…`]));
    const filters = { ...query, after: undefined };
    const path = `/w/${workspaceId}/usage/requests`;
    await this.pages.render(
      req,
      res,
      'usage-requests',
      {
        query,
        errors,
        filtered: REQUESTS_FILTERS.some((field) => query[field]),
        models,
        assistants: assistants.map((assistant) => ({ id: assistant.id, name: assistant.name })),
        keys: keys.map((key) => ({ id: key.id, name: keyNames.get(key.id)! })),
        rows: page.data.map((row) => ({
          id: row.id,
          at: formatDateTime(new Date(row.created_at)),
          model: row.model,
          assistant: row.assistant_id ? (names.get(row.assistant_id) ?? 'deleted assistant') : null,
          // The name the key had then; a key deleted since keeps it too.
          key: row.api_key_id ? (row.api_key_name ?? keyNames.get(row.api_key_id) ?? 'a key') : null,
          status: row.status,
          errorCode: row.error_code,
          tokens: row.total_tokens.toLocaleString('en-US'),
          cost: formatMillicents(row.exact.totalCostMillicents),
          latency: `${row.latency_ms.toLocaleString('en-US')} ms`,
          userId: row.user_id,
          source: row.source,
          tools: row.tools_used.join(', '),
        })),
        nextHref: page.has_more ? `${path}${queryString({ ...filters, after: page.next_cursor ?? undefined })}` : null,
        firstHref: query.after ? `${path}${queryString(filters)}` : null,
        csvHref: `/w/${workspaceId}/usage/requests.csv${queryString(filters)}`,
        retentionDays: this.config.usageRetentionDays,
      },
      Object.keys(errors).length > 0 ? 400 : 200,
    );
  }

  /** Every request of the filters (all pages) as CSV, newest first, with exact costs. */
  @Get('requests.csv')
  @RequireRole('member')
  async requestsCsv(@Req() req: PageRequest, @Res() res: Response, @Query() rawQuery: Record<string, unknown>): Promise<void> {
    const read = readRequestsQuery({ ...requestsQueryOf(rawQuery), after: '' });
    if (!read.ok) {
      res.status(400).type('text/plain').send(`Bad filters: ${Object.values(read.errors).join(' ')}`);
      return;
    }
    await sendCsv(
      res,
      `usage-requests-${req.member!.id}.csv`,
      [
        'id', 'created_at', 'request_id', 'model', 'assistant_id', 'status', 'error_code', 'input_tokens', 'output_tokens',
        'total_tokens', 'llm_cost_millicents', 'tool_cost_millicents', 'total_cost_millicents', 'latency_ms', 'user_id',
        'subscription_id', 'tools_used', 'source', 'api_key_id', 'api_key_name',
      ],
      this.explorer.all(req.member!.id, read.filter),
      (row) => [
        row.id, row.created_at, row.request_id, row.model, row.assistant_id, row.status, row.error_code, row.input_tokens,
        row.output_tokens, row.total_tokens, row.exact.llmCostMillicents, row.exact.toolCostMillicents,
        row.exact.totalCostMillicents, row.latency_ms, row.user_id, row.subscription_id, row.tools_used.join(' '), row.source,
        row.api_key_id, row.api_key_name,
      ],
    );
  }
}

const REQUESTS_FILTERS: (keyof RequestsQuery)[] = ['model', 'key', 'assistant', 'status', 'user', 'from', 'to'];

async function* toAsync<T>(rows: T[]): AsyncGenerator<T> {
  yield* rows;
}
