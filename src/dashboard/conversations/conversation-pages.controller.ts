import { Body, Get, Param, Post, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { AssistantsService } from '../../assistants/assistants.service';
import { SEARCH_CANDIDATE_LIMIT } from '../../conversations/conversation-limits';
import { ConversationSearch } from '../../conversations/conversation-search';
import { ConversationStatsService } from '../../conversations/conversation-stats.service';
import { ConversationStore } from '../../conversations/conversation-store';
import { MAX_QUERY_LENGTH, MAX_TITLE_LENGTH } from '../../conversations/dto/conversation-requests.dto';
import type { StoredMessageRole } from '../../conversations/entities/conversation-message.entity';
import type { Conversation, ConversationSource } from '../../conversations/entities/conversation.entity';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import { formatDateTime, formatMillicents } from '../format';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { snippetHtml } from './snippet';
import { costText, transcriptOf } from './transcript';

const PAGE_SIZE = 20;

/** Where a conversation started, as the pages say it. */
const SOURCE_LABELS: Record<ConversationSource, string> = { api: 'API', dashboard: 'playground', widget: 'widget' };

const MATCHED_IN: Record<StoredMessageRole, string> = { user: 'a message', assistant: 'an answer', system: 'a system message', tool: 'a tool result' };

interface Form {
  [field: string]: string | undefined;
}

/**
 * Conversations: the list (newest activity first, a page at a time), full-text search with
 * highlighted snippets (the API's search), statistics, and one conversation's transcript
 * with each turn's cost and tools. Members read and rename; admins delete.
 */
@DashboardController('w/:workspaceId/conversations')
export class ConversationPagesController {
  constructor(
    private readonly pages: PagesService,
    private readonly conversations: ConversationStore,
    private readonly conversationSearch: ConversationSearch,
    private readonly conversationStats: ConversationStatsService,
    private readonly assistants: AssistantsService,
  ) {}

  @Get()
  @RequireRole('member')
  async list(
    @Req() req: PageRequest,
    @Res() res: Response,
    @Query('q') q?: string,
    @Query('after') after?: string,
    @Query('offset') offsetText?: string,
    @Query('before') beforeText?: string,
  ): Promise<void> {
    const workspaceId = req.member!.id;
    const query = typeof q === 'string' ? q.trim().slice(0, MAX_QUERY_LENGTH) : '';
    const [assistants, stats, byAssistant] = await Promise.all([
      this.assistants.list(workspaceId),
      this.conversationStats.stats(workspaceId),
      this.conversationStats.countsByAssistant(workspaceId),
    ]);
    const assistantNames = new Map(assistants.map((assistant) => [assistant.id, assistant.name]));
    const view = { assistantNames };
    let search = null;
    let list = null;
    if (query !== '') {
      const offset = /^\d{1,6}$/.test(offsetText ?? '') ? Number(offsetText) : 0;
      // The search's own cursor (next_before); anything else is left out rather than refused.
      const before = typeof beforeText === 'string' && /^[\w-]{1,200}$/.test(beforeText) ? beforeText : undefined;
      const page = await this.conversationSearch.search(workspaceId, { q: query, limit: PAGE_SIZE, offset, before });
      search = {
        before: before ?? null,
        searchedUntil: page.searched_until ? formatDateTime(page.searched_until) : null,
        candidateLimit: SEARCH_CANDIDATE_LIMIT.toLocaleString('en-US'),
        nextBefore: page.next_before,
        hits: page.data.map((hit) => ({
          ...conversationRow(hit.conversation, view),
          snippet: snippetHtml(hit.snippet),
          matched: hit.message ? `in ${MATCHED_IN[hit.message.role]} of ${formatDateTime(hit.message.createdAt)}` : 'in the title',
        })),
        nextOffset: page.next_offset,
        previousOffset: offset > 0 ? Math.max(0, offset - PAGE_SIZE) : null,
      };
    } else {
      const page = await this.conversations.list(workspaceId, { limit: PAGE_SIZE, startingAfter: typeof after === 'string' && after !== '' ? after : undefined });
      list = { rows: page.data.map((conversation) => conversationRow(conversation, view)), next: page.next_cursor, isFirstPage: !after };
    }
    const { totals } = stats;
    await this.pages.render(req, res, 'conversations', {
      query,
      search,
      list,
      stats: {
        conversations: totals.conversations.toLocaleString('en-US'),
        messages: totals.messages.toLocaleString('en-US'),
        averageLength: averageText(totals.messages, totals.conversations),
        cost: formatMillicents(totals.cost_millicents),
        fromPlayground: stats.by_source.dashboard.toLocaleString('en-US'),
        fromWidget: stats.by_source.widget.toLocaleString('en-US'),
        byAssistant: byAssistant.map((row) => ({
          name: row.assistantId === null ? 'No assistant (a model directly)' : (assistantNames.get(row.assistantId) ?? 'A deleted assistant'),
          conversations: row.conversations.toLocaleString('en-US'),
          messages: row.messages.toLocaleString('en-US'),
          averageLength: averageText(row.messages, row.conversations),
        })),
      },
      hasConversations: totals.conversations > 0,
    });
  }

  @Get(':conversationId')
  @RequireRole('member')
  async show(@Req() req: PageRequest, @Res() res: Response, @Param('conversationId') conversationId: string): Promise<void> {
    await this.renderConversation(req, res, conversationId, {});
  }

  @Post(':conversationId/rename')
  @RequireRole('member')
  async rename(@Req() req: PageRequest, @Res() res: Response, @Param('conversationId') conversationId: string, @Body() form: Form): Promise<void> {
    const workspaceId = req.member!.id;
    const title = (form.title ?? '').trim();
    if (title.length > MAX_TITLE_LENGTH) {
      return this.renderConversation(req, res, conversationId, { title: `A title has at most ${MAX_TITLE_LENGTH} characters.` }, form.title, 400);
    }
    // An empty title removes it.
    await this.conversations.update(workspaceId, conversationId, { title: title === '' ? null : title });
    await this.pages.redirect(req, res, `/w/${workspaceId}/conversations/${conversationId}`, {
      kind: 'success',
      text: title === '' ? 'The conversation has no title now.' : `Renamed to "${title}".`,
    });
  }

  @Post(':conversationId/delete')
  @RequireRole('admin')
  async delete(@Req() req: PageRequest, @Res() res: Response, @Param('conversationId') conversationId: string): Promise<void> {
    const workspaceId = req.member!.id;
    const conversation = await this.conversations.get(workspaceId, conversationId);
    await this.conversations.delete(workspaceId, conversationId);
    await this.pages.redirect(req, res, `/w/${workspaceId}/conversations`, {
      kind: 'success',
      text: `Deleted "${conversation.title ?? 'Untitled'}" and its ${conversation.messageCount} messages.`,
    });
  }

  private async renderConversation(
    req: PageRequest,
    res: Response,
    conversationId: string,
    errors: Record<string, string>,
    titleValue?: string,
    status = 200,
  ): Promise<void> {
    const workspaceId = req.member!.id;
    // Unknown, malformed or another workspace's: the page's 404.
    const conversation = await this.conversations.get(workspaceId, conversationId);
    const [transcript, assistants] = await Promise.all([transcriptOf(this.conversations, workspaceId, conversation.id), this.assistants.list(workspaceId)]);
    const row = conversationRow(conversation, { assistantNames: new Map(assistants.map((assistant) => [assistant.id, assistant.name])) });
    await this.pages.render(
      req,
      res,
      'conversation',
      {
        conversation: {
          ...row,
          rawTitle: titleValue ?? conversation.title ?? '',
          tokens: `${conversation.totalInputTokens.toLocaleString('en-US')} in, ${conversation.totalOutputTokens.toLocaleString('en-US')} out`,
          cost: costText(conversation.totalCostMillicents),
          created: formatDateTime(conversation.createdAt),
        },
        transcript,
        errors,
        titleMaxLength: MAX_TITLE_LENGTH,
        canDelete: roleAtLeast(req.member!.role, 'admin'),
      },
      status,
    );
  }
}

/** A conversation as a row of the list shows it. */
function conversationRow(conversation: Conversation, view: { assistantNames: ReadonlyMap<string, string> }) {
  return {
    id: conversation.id,
    title: conversation.title ?? 'Untitled',
    assistant: conversation.assistantId === null ? 'none' : (view.assistantNames.get(conversation.assistantId) ?? 'deleted assistant'),
    source: SOURCE_LABELS[conversation.source],
    messages: conversation.messageCount.toLocaleString('en-US'),
    cost: formatMillicents(conversation.totalCostMillicents),
    lastActivity: formatDateTime(conversation.lastMessageAt ?? conversation.createdAt),
  };
}

/** Messages per conversation, to one decimal: `4.5`; `0` without conversations. */
function averageText(messages: number, conversations: number): string {
  return conversations === 0 ? '0' : (Math.round((messages / conversations) * 10) / 10).toLocaleString('en-US');
}
