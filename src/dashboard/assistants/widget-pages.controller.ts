import { Body, Get, NotFoundException, Param, Post, Req, Res } from '@nestjs/common';
import { isUUID } from 'class-validator';
import type { Response } from 'express';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { AssistantsService } from '../../assistants/assistants.service';
import type { Assistant } from '../../assistants/entities/assistant.entity';
import { ApiError } from '../../common/errors/api-error';
import type { Widget } from '../../widget/entities/widget.entity';
import { WIDGET_POSITIONS, WIDGET_THEMES } from '../../widget/entities/widget.entity';
import {
  defaultWidgetSettings,
  GREETING_MAX_LENGTH,
  HISTORY_MAX_TOKENS,
  MAX_DAILY_CAP_MILLICENTS,
  MAX_HISTORY_MESSAGES,
  MAX_MAX_ANSWER_TOKENS,
  MIN_MAX_ANSWER_TOKENS,
  PLACEHOLDER_MAX_LENGTH,
  readWidgetSettings,
  TITLE_MAX_LENGTH,
  WidgetSettingsField,
  WidgetSettingsInput,
  widgetSettingsInput,
} from '../../widget/widget-settings';
import { ALERT_SHARE_PERCENT, WidgetSpendingService } from '../../widget/widget-spending.service';
import { WidgetsService } from '../../widget/widgets.service';
import { formatMillicents } from '../format';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';

type Form = Record<string, string | string[] | undefined>;

/**
 * An assistant's chat widget, a page of the assistant editor: everyone in the workspace sees
 * its settings and embed tag; admins and owners change them, as they edit the assistant.
 * The live preview is the real widget.js, drawn from the form's values (nothing is sent).
 */
@DashboardController('w/:workspaceId/assistants/:assistantId/widget')
export class WidgetPagesController {
  constructor(
    private readonly pages: PagesService,
    private readonly assistants: AssistantsService,
    private readonly widgets: WidgetsService,
    private readonly spending: WidgetSpendingService,
  ) {}

  @Get()
  @RequireRole('member')
  async page(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    const widget = await this.widgets.forAssistant(req.member!.id, assistant.id);
    await this.renderPage(req, res, assistant, widget, widgetSettingsInput(widget ?? defaultWidgetSettings(assistant.name)), {});
  }

  @Post()
  @RequireRole('admin')
  async save(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string, @Body() form: Form): Promise<void> {
    const assistant = await this.find(req, assistantId);
    const input = readForm(form);
    const read = readWidgetSettings(input);
    const existing = await this.widgets.forAssistant(req.member!.id, assistant.id);
    if (!read.ok) return this.renderPage(req, res, assistant, existing, input, read.errors, 400);
    const saved = await this.widgets.save(req.member!.id, assistant.id, read.settings);
    await this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${assistant.id}/widget`, {
      kind: 'success',
      text: saved.enabled
        ? `Saved: the widget answers on ${saved.allowedOrigins.join(', ')}.`
        : 'Saved: the widget is off, and answers nowhere until you enable it.',
    });
  }

  private async renderPage(
    req: PageRequest,
    res: Response,
    assistant: Assistant,
    widget: Widget | null,
    values: WidgetSettingsInput,
    errors: Partial<Record<WidgetSettingsField, string>>,
    status = 200,
  ): Promise<void> {
    const branding = await this.widgets.brandingFor(req.member!.id, this.pages.absoluteUrl(req, '/'));
    const scriptUrl = this.pages.absoluteUrl(req, '/widget.js');
    const today = widget ? await this.spending.today(widget) : null;
    await this.pages.render(
      req,
      res,
      'assistant-widget',
      {
        assistant: { id: assistant.id, name: assistant.name },
        widget: widget ? { publicId: widget.publicId, enabled: widget.enabled, origins: widget.allowedOrigins } : null,
        values,
        errors,
        canManage: roleAtLeast(req.member!.role, 'admin'),
        themes: WIDGET_THEMES,
        positions: WIDGET_POSITIONS,
        maxLengths: { title: TITLE_MAX_LENGTH, greeting: GREETING_MAX_LENGTH, placeholder: PLACEHOLDER_MAX_LENGTH },
        bounds: {
          maxDailyCap: formatMillicents(MAX_DAILY_CAP_MILLICENTS),
          maxHistoryMessages: MAX_HISTORY_MESSAGES,
          historyTokens: HISTORY_MAX_TOKENS.toLocaleString('en-US'),
          minAnswerTokens: MIN_MAX_ANSWER_TOKENS,
          maxAnswerTokens: MAX_MAX_ANSWER_TOKENS,
        },
        // Today's spending (UTC) against the saved cap, and the banners it calls for.
        today: today && {
          spent: formatMillicents(today.spentMillicents),
          inFlight: today.reservedMillicents > 0 ? formatMillicents(today.reservedMillicents) : null,
          cap: formatMillicents(today.capMillicents),
          refused: today.refused,
          capReached: today.capReached,
          nearCap: today.nearCap,
          alertShare: ALERT_SHARE_PERCENT,
        },
        embedTag: widget ? `<script src="${scriptUrl}" data-widget="${widget.publicId}" async></script>` : null,
        removeBranding: branding === null,
        // What the preview draws first; the page's script redraws it as the form changes.
        previewConfig: JSON.stringify({
          title: values.title,
          greeting: values.greeting,
          placeholder: values.placeholder,
          accent_color: values.accentColor,
          theme: values.theme,
          position: values.position,
          branding,
        }),
        action: `${req.basePath ?? ''}/w/${req.member!.id}/assistants/${assistant.id}/widget`,
      },
      status,
    );
  }

  /** An assistant of the route's workspace; anything else (another workspace's, a bad id) is a 404 page. */
  private async find(req: PageRequest, assistantId: string): Promise<Assistant> {
    if (!isUUID(assistantId)) throw new NotFoundException();
    try {
      return await this.assistants.resolve(req.member!.id, assistantId);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) throw new NotFoundException();
      throw error;
    }
  }
}

function readForm(form: Form): WidgetSettingsInput {
  const text = (name: string): string => {
    const value = form[name];
    return typeof value === 'string' ? value : '';
  };
  return {
    enabled: text('enabled') === 'on',
    allowedOrigins: text('allowed_origins'),
    title: text('title'),
    greeting: text('greeting'),
    placeholder: text('placeholder'),
    accentColor: text('accent_color'),
    theme: text('theme'),
    position: text('position'),
    dailyCap: text('daily_cap'),
    historyMessages: text('history_messages'),
    maxAnswerTokens: text('max_answer_tokens'),
    showSources: text('show_sources') === 'on',
  };
}
