import { dollarsField, formatMillicents, parseDollars } from '../common/dollars';
import { WIDGET_POSITIONS, WIDGET_THEMES, WidgetPosition, WidgetTheme } from './entities/widget.entity';

/** What a workspace sets of its widget; the dashboard's form and the service share these rules. */
export interface WidgetSettings {
  enabled: boolean;
  allowedOrigins: string[];
  title: string;
  greeting: string;
  placeholder: string;
  accentColor: string;
  theme: WidgetTheme;
  position: WidgetPosition;
  /** What visitors' messages may cost per UTC day, in millicents. */
  dailyCapMillicents: number;
  /** Stored messages each message replays upstream (0: none, each message stands alone). */
  historyMessages: number;
  /** The `max_tokens` of each answer. */
  maxAnswerTokens: number;
  /** Visitors see the sources an answer cites (off by default). */
  showSources: boolean;
}

export const MAX_ALLOWED_ORIGINS = 20;
export const TITLE_MAX_LENGTH = 60;
export const GREETING_MAX_LENGTH = 500;
export const PLACEHOLDER_MAX_LENGTH = 80;
/** $5 a day: a few hundred short answers on a small model, and a bounded loss if a script drives the widget. */
export const DEFAULT_DAILY_CAP_MILLICENTS = 500_000;
/** $1,000 a day at most: beyond that a widget is a public tap on the wallet, better served by the API. */
export const MAX_DAILY_CAP_MILLICENTS = 100_000_000;
export const DEFAULT_HISTORY_MESSAGES = 6;
export const MAX_HISTORY_MESSAGES = 20;
/** The history a message replays is also bounded in tokens, whatever the number of messages. */
export const HISTORY_MAX_TOKENS = 4_000;
export const DEFAULT_MAX_ANSWER_TOKENS = 512;
export const MIN_MAX_ANSWER_TOKENS = 16;
export const MAX_MAX_ANSWER_TOKENS = 4_096;

/** A new widget's settings: off, no origin yet, the assistant's name as its title. */
export function defaultWidgetSettings(assistantName: string): WidgetSettings {
  return {
    enabled: false,
    allowedOrigins: [],
    title: assistantName.slice(0, TITLE_MAX_LENGTH),
    greeting: 'Hello! How can I help you?',
    placeholder: 'Ask a question…',
    accentColor: '#1e66f5',
    theme: 'light',
    position: 'bottom-right',
    dailyCapMillicents: DEFAULT_DAILY_CAP_MILLICENTS,
    historyMessages: DEFAULT_HISTORY_MESSAGES,
    maxAnswerTokens: DEFAULT_MAX_ANSWER_TOKENS,
    showSources: false,
  };
}

export type WidgetSettingsField = keyof WidgetSettings;
export type WidgetSettingsResult = { ok: true; settings: WidgetSettings } | { ok: false; errors: Partial<Record<WidgetSettingsField, string>> };

/** The raw values of the form (strings as typed; origins one per line or separated by spaces or commas). */
export interface WidgetSettingsInput {
  enabled: boolean;
  allowedOrigins: string;
  title: string;
  greeting: string;
  placeholder: string;
  accentColor: string;
  theme: string;
  position: string;
  /** Dollars, as typed (`5`, `12.50`). */
  dailyCap: string;
  historyMessages: string;
  maxAnswerTokens: string;
  showSources: boolean;
}

/** The form's values of saved settings. */
export function widgetSettingsInput(settings: WidgetSettings): WidgetSettingsInput {
  return {
    enabled: settings.enabled,
    allowedOrigins: settings.allowedOrigins.join('\n'),
    title: settings.title,
    greeting: settings.greeting,
    placeholder: settings.placeholder,
    accentColor: settings.accentColor,
    theme: settings.theme,
    position: settings.position,
    dailyCap: dollarsField(settings.dailyCapMillicents),
    historyMessages: String(settings.historyMessages),
    maxAnswerTokens: String(settings.maxAnswerTokens),
    showSources: settings.showSources,
  };
}

/**
 * Checks and normalises the settings. Origins must be exact origins (`https://shop.example`,
 * `http://127.0.0.1:8080`): a scheme, a host, a port at most, nothing after it, because the
 * browser's `Origin` header is compared with them as written. A widget cannot be enabled
 * without at least one.
 */
export function readWidgetSettings(input: WidgetSettingsInput): WidgetSettingsResult {
  const errors: Partial<Record<WidgetSettingsField, string>> = {};
  const origins: string[] = [];
  for (const entry of input.allowedOrigins.split(/[\s,]+/).filter((part) => part !== '')) {
    const origin = exactOrigin(entry);
    if (origin === null) {
      errors.allowedOrigins = `"${entry.slice(0, 100)}" is not an origin: write the scheme, the host and the port if any, like https://www.example.com or http://localhost:8080, with no path.`;
      break;
    }
    if (!origins.includes(origin)) origins.push(origin);
  }
  if (!errors.allowedOrigins && origins.length > MAX_ALLOWED_ORIGINS) {
    errors.allowedOrigins = `At most ${MAX_ALLOWED_ORIGINS} origins.`;
  }
  if (!errors.allowedOrigins && input.enabled && origins.length === 0) {
    errors.allowedOrigins = 'Add the origin of at least one website before enabling the widget.';
  }
  const title = input.title.trim();
  if (title === '') errors.title = 'The widget needs a title.';
  else if (title.length > TITLE_MAX_LENGTH) errors.title = `At most ${TITLE_MAX_LENGTH} characters.`;
  const greeting = input.greeting.trim();
  if (greeting.length > GREETING_MAX_LENGTH) errors.greeting = `At most ${GREETING_MAX_LENGTH} characters.`;
  const placeholder = input.placeholder.trim();
  if (placeholder === '') errors.placeholder = 'The input needs a placeholder, which tells visitors what to write.';
  else if (placeholder.length > PLACEHOLDER_MAX_LENGTH) errors.placeholder = `At most ${PLACEHOLDER_MAX_LENGTH} characters.`;
  const accentColor = input.accentColor.trim().toLowerCase();
  if (!/^#[0-9a-f]{6}$/.test(accentColor)) errors.accentColor = 'A colour in the form #rrggbb, like #1e66f5.';
  if (!(WIDGET_THEMES as readonly string[]).includes(input.theme)) errors.theme = 'Light or dark.';
  if (!(WIDGET_POSITIONS as readonly string[]).includes(input.position)) errors.position = 'Bottom right or bottom left.';
  const dailyCapMillicents = parseDollars(input.dailyCap);
  if (dailyCapMillicents === null || dailyCapMillicents < 1_000 || dailyCapMillicents > MAX_DAILY_CAP_MILLICENTS) {
    errors.dailyCapMillicents = `A daily cap in dollars, from $0.01 to ${formatMillicents(MAX_DAILY_CAP_MILLICENTS)} (turn the widget off to stop it).`;
  }
  const historyMessages = wholeNumber(input.historyMessages);
  if (historyMessages === null || historyMessages > MAX_HISTORY_MESSAGES) errors.historyMessages = `A whole number of messages from 0 to ${MAX_HISTORY_MESSAGES}.`;
  const maxAnswerTokens = wholeNumber(input.maxAnswerTokens);
  if (maxAnswerTokens === null || maxAnswerTokens < MIN_MAX_ANSWER_TOKENS || maxAnswerTokens > MAX_MAX_ANSWER_TOKENS) {
    errors.maxAnswerTokens = `A whole number of tokens from ${MIN_MAX_ANSWER_TOKENS} to ${MAX_MAX_ANSWER_TOKENS.toLocaleString('en-US')}.`;
  }
  if (Object.keys(errors).length > 0) return { ok: false, errors };
  return {
    ok: true,
    settings: {
      enabled: input.enabled,
      allowedOrigins: origins,
      title,
      greeting,
      placeholder,
      accentColor,
      theme: input.theme as WidgetTheme,
      position: input.position as WidgetPosition,
      dailyCapMillicents: dailyCapMillicents!,
      historyMessages: historyMessages!,
      maxAnswerTokens: maxAnswerTokens!,
      showSources: input.showSources,
    },
  };
}

function wholeNumber(input: string): number | null {
  const text = input.trim().replace(/,/g, '');
  return /^\d{1,6}$/.test(text) ? Number(text) : null;
}

/** `entry` as the browser writes it in `Origin` (lowercase host, no default port), or null when it is not exactly an origin. */
export function exactOrigin(entry: string): string | null {
  const written = entry.replace(/\/$/, '');
  if (!/^https?:\/\/[^/?#@\s]+$/i.test(written)) return null;
  try {
    const url = new URL(written);
    if (url.username || url.password || url.origin === 'null') return null;
    return url.origin;
  } catch {
    return null;
  }
}
