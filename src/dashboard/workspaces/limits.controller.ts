import { Body, Get, Param, Post, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { ApiError } from '../../common/errors/api-error';
import { NERFING_ACTIONS, NERFING_METRICS, NERFING_SCOPES, NERFING_WINDOWS } from '../../limits/nerfing/entities/nerfing-rule.entity';
import { describeRule, NerfingRuleInput, viewOf } from '../../limits/nerfing/nerfing-rule';
import { NerfingRulesService } from '../../limits/nerfing/nerfing-rules.service';
import { TIERS, UNLIMITED } from '../../limits/tier-policy';
import { ModelsService } from '../../models/models.service';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors } from '../sessions';

/** The add form's fields, as the page posts them. */
const RULE_FIELDS = ['scope', 'user_id', 'window', 'metric', 'threshold', 'action', 'max_tokens', 'model'] as const;
const EMPTY_FORM: NerfingRuleInput = { scope: 'all', window: 'hour', metric: 'requests', action: 'block' };

const LABELS = {
  scope: { all: 'Every end user (each user_id apart)', user: 'One user_id', widget_visitors: 'Chat widget visitors (each apart)' },
  window: { minute: 'Minute', hour: 'Hour', day: 'Day (UTC)', month: 'Month (UTC)' },
  metric: { requests: 'Requests', tokens: 'Tokens (input + output)', cost_millicents: 'Cost (millicents)' },
  action: { block: 'Block (429 until the window ends)', cap_output: 'Cap the output (max_tokens)', downgrade: 'Serve a cheaper model' },
};

/**
 * Settings > Limits: the workspace's nerfing rules (restriction rules for its end users),
 * in the order they apply. Everyone in the workspace reads them; admins and owners add,
 * delete and reorder them. Every rule is checked by NerfingRulesService, the same as for
 * any other caller (the tier's count included).
 */
@DashboardController('w/:workspaceId/settings/limits')
export class LimitsPagesController {
  constructor(
    private readonly pages: PagesService,
    private readonly rules: NerfingRulesService,
    private readonly models: ModelsService,
  ) {}

  @Get()
  @RequireRole('member')
  async list(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.render(req, res, EMPTY_FORM, {});
  }

  @Post()
  @RequireRole('admin')
  async add(@Req() req: PageRequest, @Res() res: Response, @Body() body: Record<string, unknown>): Promise<void> {
    const form = Object.fromEntries(RULE_FIELDS.map((field) => [field, typeof body[field] === 'string' ? body[field] : ''])) as NerfingRuleInput;
    try {
      await this.rules.add(req.member!.id, form);
    } catch (error) {
      return this.render(req, res, form, formErrors(error), error instanceof ApiError ? error.status : 400);
    }
    await this.pages.redirect(req, res, this.path(req), { kind: 'success', text: 'The rule is added. It applies to requests from now on.' });
  }

  @Post(':ruleId/delete')
  @RequireRole('admin')
  async remove(@Req() req: PageRequest, @Res() res: Response, @Param('ruleId') ruleId: string): Promise<void> {
    await this.rules.remove(req.member!.id, ruleId);
    await this.pages.redirect(req, res, this.path(req), { kind: 'success', text: 'The rule is deleted.' });
  }

  @Post(':ruleId/move')
  @RequireRole('admin')
  async move(@Req() req: PageRequest, @Res() res: Response, @Param('ruleId') ruleId: string, @Body('direction') direction: unknown): Promise<void> {
    if (direction !== 'up' && direction !== 'down') {
      return this.render(req, res, EMPTY_FORM, { form: 'Move a rule up or down.' }, 400);
    }
    await this.rules.move(req.member!.id, ruleId, direction);
    await this.pages.redirect(req, res, this.path(req));
  }

  private path(req: PageRequest): string {
    return `/w/${req.member!.id}/settings/limits`;
  }

  private async render(req: PageRequest, res: Response, values: NerfingRuleInput, errors: Record<string, string>, status = 200): Promise<void> {
    const member = req.member!;
    const rules = (await this.rules.list(member.id)).map(viewOf);
    const max = TIERS[member.tier].maxNerfingRules;
    await this.pages.render(
      req,
      res,
      'limits',
      {
        rules: rules.map((rule) => ({ ...rule, text: describeRule(rule) })),
        canManage: roleAtLeast(member.role, 'admin'),
        allowance:
          max === UNLIMITED
            ? `The ${member.tier} tier allows any number of rules.`
            : `The ${member.tier} tier allows ${max} rule${max === 1 ? '' : 's'}; this workspace has ${rules.length}.`,
        full: max !== UNLIMITED && rules.length >= max,
        choices: {
          scope: NERFING_SCOPES.map((value) => ({ value, label: LABELS.scope[value] })),
          window: NERFING_WINDOWS.map((value) => ({ value, label: LABELS.window[value] })),
          metric: NERFING_METRICS.map((value) => ({ value, label: LABELS.metric[value] })),
          action: NERFING_ACTIONS.map((value) => ({ value, label: LABELS.action[value] })),
        },
        models: this.models.list().map((model) => model.id),
        values,
        errors,
        // A form re-rendered after a POST is still this tab.
        path: this.path(req),
      },
      status,
    );
  }
}
