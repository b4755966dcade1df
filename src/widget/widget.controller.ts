import { Body, Controller, Delete, Get, Logger, Options, Param, Post, Query, Req, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { normalizeIp } from '@nestjs/throttler';
import type { Response } from 'express';
import { filter, map } from 'rxjs';
import type { ChatCaller } from '../chat/chat.service';
import { ChatService } from '../chat/chat.service';
import { chatAnnotationsOf, SourceLine, sourceLines } from '../tools/citations';
import { isKeepAlive } from '../chat/completion-types';
import { inStreamError, writeEventStream } from '../chat/sse';
import { Public } from '../common/auth/auth.decorators';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { ConversationStore } from '../conversations/conversation-store';
import { RATE_WINDOW_MS, RateLimitService } from '../limits/rate-limit.service';
import { effectiveRateLimitRpm } from '../limits/tier-policy';
import type { Workspace } from '../workspaces/entities/workspace.entity';
import { WorkspacesService } from '../workspaces/workspaces.service';
import type { Widget } from './entities/widget.entity';
import { readVisitorMessage, titleOf, VISITOR_MESSAGES_PER_CONVERSATION } from './visitor-input';
import { VisitorTokens } from './visitor-tokens';
import { HISTORY_MAX_TOKENS } from './widget-settings';
import { WidgetSpendingService } from './widget-spending.service';
import { WidgetsService } from './widgets.service';

/** Messages a visitor may send per minute. */
export const VISITOR_RATE_LIMIT_RPM = 10;
/** Messages one client address may send per minute to one widget, whatever visitor ids it makes up. */
export const ADDRESS_RATE_LIMIT_RPM = 30;
/** Messages all visitors of one widget may send per minute (the workspace's own rate applies too). */
export const WIDGET_RATE_LIMIT_RPM = 120;
/** Reads (configuration, transcript, starting over) one client address may make per minute of one widget. */
export const READ_RATE_LIMIT_RPM = 120;
/**
 * Requests of any kind one client address may make per minute to all widgets together,
 * counted before the widget is looked up: what bounds the database reads of made-up ids.
 */
export const ADDRESS_REQUEST_RATE_LIMIT_RPM = 1_200;
/** New visitor tokens one client address may get per hour from one widget: what bounds a script's made-up visitors. */
export const NEW_VISITORS_PER_HOUR = 10;
const HOUR_MS = 3_600_000;

/** What a visitor is told when the workspace cannot serve the chat (its wallet is empty, the operator suspended it): the reasons are not theirs. */
const UNAVAILABLE_MESSAGE = 'This chat is not available at the moment. Please try again later.';
/** What a visitor is told when they write faster than the limits allow. */
const TOO_QUICK_MESSAGE = "You're sending messages quickly; wait a moment.";

/** The most messages the transcript of a visitor's conversation returns (two per visitor message). */
const TRANSCRIPT_MAX_MESSAGES = 2 * VISITOR_MESSAGES_PER_CONVERSATION;

/**
 * The widget's public endpoints, called from other websites by widget.js: no API key, the
 * widget's public id in the path. Only the widget's allowed origins get an answer they can
 * read: the `Origin` header is checked first and the CORS headers are set for those origins
 * only. Visitors' messages run through ChatService as the workspace (no key), charged to its
 * wallet, with usage records whose source is `widget` and whose user_id is the visitor id.
 * Visitors are known by tokens this service issues (VisitorTokens, bound to the address that
 * got them); each message fits in the widget's daily cap (WidgetSpendingService) and replays
 * a bounded history with a capped answer (the widget's settings).
 */
@ApiExcludeController()
@Public()
@Controller('widget/v1')
export class WidgetController {
  private readonly logger = new Logger('Widget');

  constructor(
    private readonly widgets: WidgetsService,
    private readonly chat: ChatService,
    private readonly conversations: ConversationStore,
    private readonly workspaces: WorkspacesService,
    private readonly rateLimits: RateLimitService,
    private readonly visitorTokens: VisitorTokens,
    private readonly spending: WidgetSpendingService,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  /** CORS preflight of the POST and DELETE below (JSON bodies are not "simple" requests). */
  @Options(':widgetId/*path')
  async preflight(@Req() req: ApiRequest, @Res() res: Response, @Param('widgetId') widgetId: string): Promise<void> {
    await this.find(req, res, widgetId);
    res.setHeader('Access-Control-Allow-Methods', 'GET, POST, DELETE');
    res.setHeader('Access-Control-Allow-Headers', 'Content-Type');
    res.setHeader('Access-Control-Max-Age', '600');
    res.status(204).end();
  }

  /** What the widget draws: texts, colours, and the branding decided from the workspace's tier now. */
  @Get(':widgetId/config')
  async configuration(@Req() req: ApiRequest, @Res() res: Response, @Param('widgetId') widgetId: string): Promise<void> {
    const { widget } = await this.admit(req, res, widgetId);
    await this.limitReads(req, res, widget);
    const branding = await this.widgets.brandingFor(widget.workspaceId, this.serviceUrl(req));
    res.setHeader('Cache-Control', 'no-store');
    res.json({
      title: widget.title,
      greeting: widget.greeting,
      placeholder: widget.placeholder,
      accent_color: widget.accentColor,
      theme: widget.theme,
      position: widget.position,
      branding,
    });
  }

  /**
   * A visitor token for this browser: `{visitor, expires_at}`. With `{"visitor": "<an earlier
   * token of this widget>"}` (expired, or from another address) the visitor keeps their id and
   * conversation. At most NEW_VISITORS_PER_HOUR per address and widget.
   */
  @Post(':widgetId/visitors')
  async newVisitor(@Req() req: ApiRequest, @Res() res: Response, @Param('widgetId') widgetId: string, @Body() body: unknown): Promise<void> {
    const { widget } = await this.admit(req, res, widgetId);
    try {
      await this.rateLimits.enforce(`widget-visitors:${widget.id}:${addressOf(req)}`, NEW_VISITORS_PER_HOUR, HOUR_MS, res);
    } catch (error) {
      throw this.visitorError(error, 'Too many new chats from your network just now. Please try again later.');
    }
    const earlier = (typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {}).visitor;
    const keep = this.visitorTokens.renewable(earlier, widget.id) ?? undefined;
    const issued = this.visitorTokens.issue(widget.id, addressOf(req), keep);
    res.setHeader('Cache-Control', 'no-store');
    res.status(201).json({ visitor: issued.token, expires_at: Math.floor(issued.expiresAt.getTime() / 1000) });
  }

  /** The visitor's conversation so far (user and assistant messages, oldest first), to show it again after a reload. */
  @Get(':widgetId/conversation')
  async conversation(@Req() req: ApiRequest, @Res() res: Response, @Param('widgetId') widgetId: string, @Query('visitor') visitor: unknown): Promise<void> {
    const { widget } = await this.admit(req, res, widgetId);
    await this.limitReads(req, res, widget);
    const visitorId = this.visitorTokens.visitorOf(visitor, widget.id, addressOf(req));
    const conversationId = await this.widgets.conversationOf(widget, visitorId);
    res.setHeader('Cache-Control', 'no-store');
    if (!conversationId) {
      res.json({ messages: [], can_continue: true });
      return;
    }
    const [conversation, page] = await Promise.all([
      this.conversations.get(widget.workspaceId, conversationId),
      this.conversations.messages(widget.workspaceId, conversationId, { limit: TRANSCRIPT_MAX_MESSAGES }),
    ]);
    res.json({
      messages: page.data
        .filter((message) => (message.role === 'user' || message.role === 'assistant') && message.contentType !== 'json' && message.content !== '')
        .map((message) => {
          const sources = widget.showSources && message.role === 'assistant' ? sourceLines(chatAnnotationsOf(message.annotations)) : [];
          return { role: message.role, content: message.content, ...(sources.length ? { sources } : {}) };
        }),
      can_continue: conversation.messageCount < TRANSCRIPT_MAX_MESSAGES,
    });
  }

  /** Starts over: the visitor's next message opens a new conversation (the old one stays in the workspace's history). */
  @Delete(':widgetId/conversation')
  async newConversation(@Req() req: ApiRequest, @Res() res: Response, @Param('widgetId') widgetId: string, @Query('visitor') visitor: unknown): Promise<void> {
    const { widget } = await this.admit(req, res, widgetId);
    await this.limitReads(req, res, widget);
    await this.widgets.forgetConversation(widget, this.visitorTokens.visitorOf(visitor, widget.id, addressOf(req)));
    res.status(204).end();
  }

  /**
   * One visitor message; the answer streamed as Server-Sent Events of `{"delta": "..."}`,
   * then `[DONE]`. Nothing else of the chat's chunks reaches the page (no cost, no model).
   * A refusal before the first word (400, 402, 429, the upstream refusing) is a JSON error
   * whose message the widget shows as it is. Past the widget's daily cap: 402
   * `widget_daily_cap`, "This chat is resting for today".
   */
  @Post(':widgetId/messages')
  async message(@Req() req: ApiRequest, @Res() res: Response, @Param('widgetId') widgetId: string, @Body() body: unknown): Promise<void> {
    const { widget, workspace } = await this.admit(req, res, widgetId);
    const visitorId = this.visitorTokens.visitorOf((body as { visitor?: unknown } | null)?.visitor, widget.id, addressOf(req));
    const { message } = readVisitorMessage(body);
    const rateLimitRpm = effectiveRateLimitRpm(workspace.tier, workspace.customRateLimitRpm);
    try {
      await this.rateLimits.enforce(`widget-visitor:${widget.id}:${visitorId}`, VISITOR_RATE_LIMIT_RPM, RATE_WINDOW_MS, res);
      await this.rateLimits.enforce(`widget-ip:${widget.id}:${addressOf(req)}`, ADDRESS_RATE_LIMIT_RPM, RATE_WINDOW_MS, res);
      await this.rateLimits.enforce(`widget:${widget.id}`, WIDGET_RATE_LIMIT_RPM, RATE_WINDOW_MS, res);
      // The workspace's own window too: a widget is no way around the tier's rate.
      await this.rateLimits.enforce(`ws:${workspace.id}`, rateLimitRpm, RATE_WINDOW_MS, res);
    } catch (error) {
      throw this.visitorError(error, TOO_QUICK_MESSAGE);
    }

    const existing = await this.widgets.conversationOf(widget, visitorId);
    if (existing) {
      const conversation = await this.conversations.get(widget.workspaceId, existing);
      if (conversation.messageCount >= TRANSCRIPT_MAX_MESSAGES) {
        throw new ApiError('conflict', 'This conversation is as long as it may get: start a new one.', { code: 'conversation_full' });
      }
    }
    const started = existing ? null : await this.widgets.startConversation(widget, visitorId, titleOf(message));
    const conversationId = existing ?? started!.id;

    const caller: ChatCaller = {
      principal: { workspaceId: workspace.id, apiKeyId: null, tier: workspace.tier, rateLimitRpm },
      requestId: req.id,
      source: 'widget',
      bounds: {
        historyMessages: widget.historyMessages,
        historyTokens: HISTORY_MAX_TOKENS,
        maxOutputTokens: widget.maxAnswerTokens,
        spending: this.spending.gateFor(widget),
      },
    };
    const request = {
      assistant_id: widget.assistantId,
      messages: [{ role: 'user', content: message }],
      conversation_id: conversationId,
      user_id: visitorId,
      stream: true,
    };
    const deltas = this.chat.stream(caller, request).pipe(
      map((event) => (isKeepAlive(event) ? event : visitorEvent(event.choices[0]?.delta, widget.showSources))),
      filter((event) => isKeepAlive(event) || event.delta !== '' || event.sources !== undefined),
    );
    try {
      await writeEventStream(res, deltas, (error) => this.visitorError(inStreamError(error, req.id, this.logger)));
    } catch (error) {
      // Refused before its first word: nothing was stored, so the conversation made for it goes too.
      if (started?.created) await this.widgets.dropConversation(widget, visitorId, conversationId);
      throw this.visitorError(error);
    }
  }

  /**
   * The widget, known by its public id, asked from one of its allowed origins: sets the CORS
   * headers for that origin. An address past ADDRESS_REQUEST_RATE_LIMIT_RPM: 429 before any
   * lookup. Unknown id: 404; origin missing or not allowed: 403 without CORS headers (the page
   * cannot read anything). Enough for a preflight.
   */
  private async find(req: ApiRequest, res: Response, widgetId: string): Promise<Widget> {
    await this.rateLimits.enforce(`widget-address:${addressOf(req)}`, ADDRESS_REQUEST_RATE_LIMIT_RPM, RATE_WINDOW_MS, res);
    const widget = await this.widgets.findPublic(widgetId);
    const origin = req.headers.origin;
    if (typeof origin !== 'string' || !widget.allowedOrigins.includes(origin)) {
      throw ApiError.permissionDenied(
        origin ? `This chat widget is not allowed on ${origin.slice(0, 200)}.` : 'This chat widget answers browsers on its allowed websites only (no Origin header).',
        'origin_not_allowed',
      );
    }
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Access-Control-Expose-Headers', 'Retry-After, X-Request-Id');
    res.setHeader('Cross-Origin-Resource-Policy', 'cross-origin');
    res.vary('Origin');
    return widget;
  }

  /**
   * `find`, then the widget and its workspace as they are now, read at each request (so a
   * change shows at once on every replica): turned off, 403 `widget_disabled`, readable, so
   * that the widget stays hidden; its workspace suspended by the operator, 403
   * `workspace_suspended` with a visitor's wording, which the widget shows.
   */
  private async admit(req: ApiRequest, res: Response, widgetId: string): Promise<{ widget: Widget; workspace: Workspace }> {
    const widget = await this.find(req, res, widgetId);
    if (!widget.enabled) throw ApiError.permissionDenied('This chat widget is turned off.', 'widget_disabled');
    const workspace = await this.workspaces.get(widget.workspaceId);
    if (workspace.status === 'suspended') throw ApiError.permissionDenied(UNAVAILABLE_MESSAGE, 'workspace_suspended');
    return { widget, workspace };
  }

  /** Cheap requests, but each one reads the database: a page reloaded in a loop is stopped too. */
  private async limitReads(req: ApiRequest, res: Response, widget: Widget): Promise<void> {
    await this.rateLimits.enforce(`widget-read:${widget.id}:${addressOf(req)}`, READ_RATE_LIMIT_RPM, RATE_WINDOW_MS, res);
  }

  /**
   * Visitors see what they can act on; the workspace's wallet and the upstream's details are
   * not theirs to read. `tooQuick`: what a rate limit tells them (its Retry-After kept).
   */
  private visitorError(error: ApiError, tooQuick?: string): ApiError;
  private visitorError(error: unknown, tooQuick?: string): unknown;
  private visitorError(error: unknown, tooQuick = TOO_QUICK_MESSAGE): unknown {
    if (!(error instanceof ApiError)) return error;
    if (error.type === 'rate_limit_exceeded') {
      return new ApiError(error.type, tooQuick, { code: error.code, headers: error.headers, retryAfterSeconds: error.retryAfterSeconds });
    }
    if (error.code === 'widget_daily_cap') return error;
    if (error.type === 'insufficient_balance') {
      return new ApiError('insufficient_balance', UNAVAILABLE_MESSAGE, { code: error.code });
    }
    if (error.status >= 500) {
      return new ApiError(error.type, 'The assistant could not answer just now. Please try again in a moment.', { code: error.code, status: error.status, headers: error.headers });
    }
    return error;
  }


  /** Where "Powered by" links: this service's public address. */
  private serviceUrl(req: ApiRequest): string {
    const basePath = (req as ApiRequest & { basePath?: string }).basePath ?? '';
    return `${this.config.dashboard.publicUrl ?? `${req.protocol}://${req.get('host')}${basePath}`}/`;
  }
}

function addressOf(req: ApiRequest): string {
  return normalizeIp(req.ip ?? 'unknown');
}

/**
 * What a visitor's page gets of a chunk: its text, `{"delta"}`, or the sources the answer
 * cites, `{"sources": [{label, url}]}`, when the widget's owner shows them.
 */
function visitorEvent(delta: unknown, showSources: boolean): { delta: string; sources?: SourceLine[] } {
  const { content, annotations } = (delta ?? {}) as { content?: unknown; annotations?: unknown };
  const sources = showSources ? sourceLines(chatAnnotationsOf(annotations)) : [];
  return { delta: typeof content === 'string' ? content : '', ...(sources.length ? { sources } : {}) };
}
