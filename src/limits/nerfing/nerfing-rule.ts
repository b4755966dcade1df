import { ApiError } from '../../common/errors/api-error';
import type { ModelDefinition } from '../../models/model-catalog';
import {
  NERFING_ACTIONS,
  NERFING_METRICS,
  NERFING_SCOPES,
  NERFING_WINDOWS,
  NerfingActionType,
  NerfingMetric,
  NerfingRule,
  NerfingWindow,
} from './entities/nerfing-rule.entity';

/** The longest `user_id` a rule can name (as long as a request's user_id may be). */
export const MAX_RULE_USER_ID_LENGTH = 256;

/**
 * A rule as the API shows it (`GET /v1/limits` `nerfingRules`), snake_case like the rest of
 * /v1. The spec leaves the element shape open; this is ours (README "Nerfing rules").
 */
export interface NerfingRuleView {
  id: string;
  scope: { type: 'all' } | { type: 'user'; user_id: string } | { type: 'widget_visitors' };
  window: NerfingWindow;
  threshold: { metric: NerfingMetric; value: number };
  action: { type: 'block' } | { type: 'cap_output'; max_tokens: number } | { type: 'downgrade'; model: string };
}

/** A new rule as a form (or any flat input) gives it: every field a string, as typed. */
export interface NerfingRuleInput {
  scope?: string;
  user_id?: string;
  window?: string;
  metric?: string;
  threshold?: string;
  action?: string;
  max_tokens?: string;
  model?: string;
}

/** The stored fields of a valid rule (without id, workspace and position). */
export type NerfingRuleFields = Pick<
  NerfingRule,
  'scopeType' | 'scopeUserId' | 'window' | 'metric' | 'threshold' | 'actionType' | 'actionMaxTokens' | 'actionModel'
>;

export function viewOf(rule: NerfingRule): NerfingRuleView {
  return {
    id: rule.id,
    scope: rule.scopeType === 'user' ? { type: 'user', user_id: rule.scopeUserId! } : { type: rule.scopeType },
    window: rule.window,
    threshold: { metric: rule.metric, value: rule.threshold },
    action:
      rule.actionType === 'cap_output'
        ? { type: 'cap_output', max_tokens: rule.actionMaxTokens! }
        : rule.actionType === 'downgrade'
          ? { type: 'downgrade', model: rule.actionModel! }
          : { type: 'block' },
  } as NerfingRuleView;
}

/**
 * Checks a new rule, field by field, with `param` naming the field at fault (the dashboard
 * shows the message beside it): a known scope, window, metric and action; a positive whole
 * threshold; a positive whole output cap (a request whose cap is already lower keeps its
 * own); a downgrade to a model of the catalog (`findModel`; which requests it makes
 * cheaper is decided per request, see NerfingService).
 */
export function parseRuleInput(input: NerfingRuleInput, findModel: (id: string) => ModelDefinition | undefined): NerfingRuleFields {
  const scopeType = oneOf(input.scope, NERFING_SCOPES, 'scope', 'a scope');
  const userId = (input.user_id ?? '').trim();
  if (scopeType === 'user' && !userId) throw ApiError.badRequest('Name the user_id this rule applies to.', 'user_id');
  if (userId.length > MAX_RULE_USER_ID_LENGTH) {
    throw ApiError.badRequest(`A user_id can be at most ${MAX_RULE_USER_ID_LENGTH} characters long.`, 'user_id');
  }
  const window = oneOf(input.window, NERFING_WINDOWS, 'window', 'a window');
  const metric = oneOf(input.metric, NERFING_METRICS, 'metric', 'what to count');
  const threshold = positiveInteger(input.threshold, 'threshold', 'The threshold');
  const actionType: NerfingActionType = oneOf(input.action, NERFING_ACTIONS, 'action', 'an action');
  let actionMaxTokens: number | null = null;
  let actionModel: string | null = null;
  if (actionType === 'cap_output') {
    actionMaxTokens = positiveInteger(input.max_tokens, 'max_tokens', 'The output cap');
    if (actionMaxTokens > 2_147_483_647) throw ApiError.badRequest('The output cap is too large.', 'max_tokens');
  }
  if (actionType === 'downgrade') {
    const model = (input.model ?? '').trim();
    if (!model) throw ApiError.badRequest('Choose the model to serve instead.', 'model');
    if (!findModel(model)) throw ApiError.badRequest(`The model '${model}' is not in the catalog.`, 'model');
    actionModel = model;
  }
  return { scopeType, scopeUserId: scopeType === 'user' ? userId : null, window, metric, threshold, actionType, actionMaxTokens, actionModel };
}

function oneOf<T extends string>(value: string | undefined, allowed: readonly T[], param: string, what: string): T {
  if (value && (allowed as readonly string[]).includes(value)) return value as T;
  throw ApiError.badRequest(`Choose ${what}: one of ${allowed.join(', ')}.`, param);
}

function positiveInteger(value: string | undefined, param: string, what: string): number {
  const text = (value ?? '').trim();
  const parsed = /^\d{1,15}$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(parsed) || parsed < 1) throw ApiError.badRequest(`${what} must be a whole number of at least 1.`, param);
  return parsed;
}

/** The rule in words, for the dashboard's list. */
export function describeRule(rule: NerfingRuleView): string {
  const who =
    rule.scope.type === 'all' ? 'Each end user' : rule.scope.type === 'user' ? `The user "${rule.scope.user_id}"` : 'Each widget visitor';
  const unit = { requests: 'request', tokens: 'token', cost_millicents: 'millicent' }[rule.threshold.metric];
  const amount = `${rule.threshold.value.toLocaleString('en-US')} ${unit}${rule.threshold.value === 1 ? '' : 's'}`;
  const then =
    rule.action.type === 'block'
      ? 'is refused (429) until the window ends'
      : rule.action.type === 'cap_output'
        ? `gets at most ${rule.action.max_tokens.toLocaleString('en-US')} output tokens per request`
        : `is served ${rule.action.model} instead`;
  return `${who}, past ${amount} in ${rule.window === 'hour' ? 'an' : 'a'} ${rule.window}, ${then}.`;
}
