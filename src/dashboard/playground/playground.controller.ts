import { Body, Get, Logger, Post, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { AssistantsService } from '../../assistants/assistants.service';
import type { ChatCaller } from '../../chat/chat.service';
import { ChatService } from '../../chat/chat.service';
import { inStreamError, writeEventStream } from '../../chat/sse';
import { ConversationStore } from '../../conversations/conversation-store';
import { RATE_WINDOW_MS, RateLimitService } from '../../limits/rate-limit.service';
import { effectiveRateLimitRpm } from '../../limits/tier-policy';
import { ModelsService } from '../../models/models.service';
import { WorkspacesService } from '../../workspaces/workspaces.service';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import { formatMillicents } from '../format';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { transcriptOf } from '../conversations/transcript';
import { readPlaygroundMessage, titleOf } from './playground-message';
import { assertNotSuspended } from '../../workspaces/workspace-status';

/** Conversations offered to continue: the newest ones. */
const RECENT_CONVERSATIONS = 20;
const DEFAULT_MODEL = 'gpt-4o-mini';

/**
 * The playground: a person chats with an assistant or a model of the catalog, answers
 * streamed as they are written. Requests go through the same ChatService as
 * `POST /v1/chat/completions`, as the workspace (no API key), counted against the
 * workspace's rate limit and charged to its wallet; their usage records say `dashboard`.
 * Every chat is stored as a conversation (source `dashboard`), so it can be continued.
 */
@DashboardController('w/:workspaceId/playground')
export class PlaygroundController {
  private readonly logger = new Logger('Playground');

  constructor(
    private readonly pages: PagesService,
    private readonly chat: ChatService,
    private readonly assistants: AssistantsService,
    private readonly models: ModelsService,
    private readonly conversations: ConversationStore,
    private readonly workspaces: WorkspacesService,
    private readonly rateLimits: RateLimitService,
  ) {}

  @Get()
  @RequireRole('member')
  async page(@Req() req: PageRequest, @Res() res: Response, @Query('conversation') conversationId?: string): Promise<void> {
    const workspaceId = req.member!.id;
    // An unknown conversation is the page's 404, as for any id that is not this workspace's.
    const current = typeof conversationId === 'string' && conversationId !== '' ? await this.conversations.get(workspaceId, conversationId) : null;
    const [assistants, recent, transcript] = await Promise.all([
      this.assistants.list(workspaceId),
      this.conversations.list(workspaceId, { limit: RECENT_CONVERSATIONS }),
      current ? transcriptOf(this.conversations, workspaceId, current.id) : Promise.resolve(null),
    ]);
    const models = this.models.chatModels();
    const assistantOfCurrent = current?.assistantId ? assistants.find((assistant) => assistant.id === current.assistantId) : undefined;
    const selected = assistantOfCurrent
      ? `assistant:${assistantOfCurrent.id}`
      : assistants.length > 0 && !current
        ? `assistant:${assistants[0].id}`
        : `model:${models.find((model) => model.id === DEFAULT_MODEL)?.id ?? models[0]?.id ?? ''}`;
    const conversations = recent.data;
    // The conversation being continued is offered even when it is older than the newest ones.
    if (current && !conversations.some((conversation) => conversation.id === current.id)) conversations.unshift(current);
    await this.pages.render(req, res, 'playground', {
      assistants: assistants.map((assistant) => ({
        id: assistant.id,
        name: assistant.name,
        model: assistant.model,
        tools: assistant.tools.map((tool) => tool.type).join(', '),
      })),
      models: models.map((model) => ({
        id: model.id,
        prices: `${formatMillicents(model.inputPrice)} in, ${formatMillicents(model.outputPrice)} out per million tokens; ${model.contextLength.toLocaleString('en-US')} tokens of context`,
      })),
      selected,
      conversations: conversations.map((conversation) => ({
        id: conversation.id,
        label: `${conversation.title ?? 'Untitled'} (${conversation.messageCount} messages)`,
      })),
      current: current ? { id: current.id, title: current.title ?? 'Untitled' } : null,
      transcript,
    });
  }

  /**
   * Streams one answer as Server-Sent Events, as `/v1/chat/completions` with `stream: true`
   * does (the last chunk carries `x_service`). The conversation's id is in the
   * `X-Conversation-Id` header. A refusal before the first chunk (400, 402, 404, 429, the
   * upstream refusing) is an ordinary JSON error, which the page shows as a message.
   */
  @Post('stream')
  @RequireRole('member')
  async stream(@Req() req: PageRequest, @Res() res: Response, @Body() body: unknown): Promise<void> {
    const workspaceId = req.member!.id;
    const input = readPlaygroundMessage(body);
    const workspace = await this.workspaces.get(workspaceId);
    assertNotSuspended(workspace);
    const rateLimitRpm = effectiveRateLimitRpm(workspace.tier, workspace.customRateLimitRpm);
    // The same window as the workspace's API keys: the playground is no way around the tier's rate.
    await this.rateLimits.enforce(`ws:${workspaceId}`, rateLimitRpm, RATE_WINDOW_MS, res);

    let conversationId = input.conversationId;
    const isNew = conversationId === null;
    if (conversationId === null) {
      const created = await this.conversations.create(workspaceId, {
        title: titleOf(input.message),
        assistantId: input.assistantId,
        source: 'dashboard',
      });
      conversationId = created.id;
    }
    res.setHeader('X-Conversation-Id', conversationId);
    const caller: ChatCaller = {
      principal: { workspaceId, apiKeyId: null, tier: workspace.tier, rateLimitRpm },
      requestId: req.id,
      source: 'dashboard',
    };
    const request = {
      ...(input.assistantId ? { assistant_id: input.assistantId } : { model: input.model }),
      messages: [{ role: 'user', content: input.message }],
      conversation_id: conversationId,
      stream: true,
      stream_options: { include_usage: true },
    };
    try {
      await writeEventStream(res, this.chat.stream(caller, request), (error) => inStreamError(error, req.id, this.logger));
    } catch (error) {
      // Refused before its first chunk: nothing was stored, so the conversation made for it goes too.
      if (isNew) await this.conversations.delete(workspaceId, conversationId).catch(() => undefined);
      throw error;
    }
  }

}
