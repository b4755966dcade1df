import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { randomBytes } from 'node:crypto';
import { Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { ConversationStore } from '../conversations/conversation-store';
import { TIERS } from '../limits/tier-policy';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { WidgetConversation } from './entities/widget-conversation.entity';
import { Widget } from './entities/widget.entity';
import type { WidgetSettings } from './widget-settings';
import { isUniqueViolation } from '../common/database/unique-violation';

/** `wgt_` and 20 base64url characters (120 random bits): the id the embed tag carries. */
export const PUBLIC_WIDGET_ID = /^wgt_[A-Za-z0-9_-]{20}$/;

/** What the panel shows under the conversation unless the workspace's tier removes branding. */
export const BRANDING_TEXT = 'Powered by Assistant Chat Service';

export type Branding = { text: string; url: string } | null;

/**
 * Widgets: an assistant published on other websites. Settings are kept per assistant (the
 * dashboard's page); visitors reach a widget by its public id only, and each visitor's
 * conversation is found again by its visitor id.
 */
@Injectable()
export class WidgetsService {
  constructor(
    @InjectRepository(Widget) private readonly widgets: Repository<Widget>,
    @InjectRepository(WidgetConversation) private readonly visitorConversations: Repository<WidgetConversation>,
    private readonly workspaces: WorkspacesService,
    private readonly conversations: ConversationStore,
  ) {}

  /** The widget of an assistant of the workspace, or null when it was never set up. */
  forAssistant(workspaceId: string, assistantId: string): Promise<Widget | null> {
    return this.widgets.findOneBy({ workspaceId, assistantId });
  }

  /** Saves the settings (checked by readWidgetSettings); the first save draws the public id. */
  async save(workspaceId: string, assistantId: string, settings: WidgetSettings): Promise<Widget> {
    if (settings.enabled && settings.allowedOrigins.length === 0) {
      throw ApiError.badRequest('Add the origin of at least one website before enabling the widget.', 'allowed_origins');
    }
    const existing = await this.forAssistant(workspaceId, assistantId);
    const widget = existing ?? this.widgets.create({ workspaceId, assistantId, publicId: `wgt_${randomBytes(15).toString('base64url')}` });
    Object.assign(widget, settings);
    try {
      return await this.widgets.save(widget);
    } catch (error) {
      // Another save made this assistant's widget at the same moment (a double-clicked Save): this one updates it.
      if (!existing && isUniqueViolation(error)) return this.save(workspaceId, assistantId, settings);
      throw error;
    }
  }

  /** A widget by its public id, enabled or not; a malformed or unknown id is 404 `widget_not_found`. */
  async findPublic(publicId: string): Promise<Widget> {
    const widget = PUBLIC_WIDGET_ID.test(publicId) ? await this.widgets.findOneBy({ publicId }) : null;
    if (!widget) throw ApiError.notFound('There is no chat widget with this id.', 'widget_not_found');
    return widget;
  }

  /**
   * The branding line linking to `url` (the service's public address), or null when the
   * workspace's tier removes it. Decided at each request from the tier now, so that a tier
   * change shows at once.
   */
  async brandingFor(workspaceId: string, url: string): Promise<Branding> {
    const workspace = await this.workspaces.get(workspaceId);
    return TIERS[workspace.tier].removeBranding ? null : { text: BRANDING_TEXT, url };
  }

  /** The id of the visitor's conversation with the widget, or null when there is none (yet, or any more). */
  async conversationOf(widget: Widget, visitorId: string): Promise<string | null> {
    const found = await this.visitorConversations.findOneBy({ widgetId: widget.id, visitorId });
    return found?.conversationId ?? null;
  }

  /** Starts a visitor's conversation (stored as any conversation of the workspace, with the visitor as its user). */
  async startConversation(widget: Widget, visitorId: string, title: string): Promise<{ id: string; created: boolean }> {
    const conversation = await this.conversations.create(widget.workspaceId, {
      title,
      assistantId: widget.assistantId,
      userId: visitorId,
      source: 'widget',
      metadata: { widget: widget.publicId },
    });
    // A second tab of the same visitor may have started one at the same moment: the first one stays theirs.
    await this.visitorConversations
      .createQueryBuilder()
      .insert()
      .values({ widgetId: widget.id, visitorId, conversationId: conversation.id })
      .orIgnore()
      .execute();
    const kept = await this.conversationOf(widget, visitorId);
    if (kept !== conversation.id) await this.conversations.delete(widget.workspaceId, conversation.id);
    // `created`: this request's own conversation, which only it may drop (another tab may be chatting in the one kept).
    return { id: kept ?? conversation.id, created: kept === null || kept === conversation.id };
  }

  /** Forgets which conversation a visitor is having (the conversation stays in the workspace's history). */
  async forgetConversation(widget: Widget, visitorId: string): Promise<void> {
    await this.visitorConversations.delete({ widgetId: widget.id, visitorId });
  }

  /** Undoes startConversation for a request refused before its first word: nothing of it was stored. */
  async dropConversation(widget: Widget, visitorId: string, conversationId: string): Promise<void> {
    await this.visitorConversations.delete({ widgetId: widget.id, visitorId, conversationId });
    await this.conversations.delete(widget.workspaceId, conversationId).catch(() => undefined);
  }
}
