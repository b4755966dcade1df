/**
 * Exact costs. Prices are whole millicents per million tokens, so a cost is a whole number
 * of micro-millicents (1e-6 millicent): `tokens x price`. Costs are added up in that unit
 * (as bigint) and only turned into decimal millicents at the edges.
 */
export type MicroMillicents = bigint;

export const MICROS_PER_MILLICENT = 1_000_000n;

export interface TokenPrices {
  inputPrice: number;
  outputPrice: number;
  cachedInputPrice: number;
  /** Input tokens written to the provider's prompt cache (Anthropic's are dearer than input); inputPrice when absent. */
  cacheWritePrice?: number;
}

/** The tokens of one model call or of a whole request (the chat module sums them per request). */
export interface TokenCounts {
  inputTokens: number;
  outputTokens: number;
  /** The part of the input tokens served from the provider's prompt cache. */
  cachedTokens: number;
  /** The part of the input tokens written to the provider's prompt cache (0 when absent). */
  cacheWriteTokens?: number;
}

export function llmCost(prices: TokenPrices, tokens: TokenCounts): MicroMillicents {
  const cached = Math.min(tokens.cachedTokens, tokens.inputTokens);
  const written = Math.min(tokens.cacheWriteTokens ?? 0, tokens.inputTokens - cached);
  return (
    BigInt(tokens.inputTokens - cached - written) * BigInt(prices.inputPrice) +
    BigInt(cached) * BigInt(prices.cachedInputPrice) +
    BigInt(written) * BigInt(prices.cacheWritePrice ?? prices.inputPrice) +
    BigInt(tokens.outputTokens) * BigInt(prices.outputPrice)
  );
}

/**
 * Prices a hold can count a prompt at without knowing which of its tokens a provider will write
 * to its cache: the dearer of input and cache write for every prompt token (the request's worst
 * case: Anthropic bills a cache write at 1.25 times input).
 */
export function promptCeiling<T extends TokenPrices>(prices: T): T {
  const write = prices.cacheWritePrice ?? prices.inputPrice;
  return write > prices.inputPrice ? { ...prices, inputPrice: write } : prices;
}

/** Whole millicents of a per-call price (configured in millicents). */
export function microsOf(millicents: number): MicroMillicents {
  return BigInt(millicents) * MICROS_PER_MILLICENT;
}

/** `1234567n` -> `"1.234567"`: exact, for `numeric` columns. */
export function toDecimalString(micros: MicroMillicents): string {
  const sign = micros < 0n ? '-' : '';
  const abs = micros < 0n ? -micros : micros;
  const whole = abs / MICROS_PER_MILLICENT;
  const fraction = (abs % MICROS_PER_MILLICENT).toString().padStart(6, '0');
  return `${sign}${whole}.${fraction}`;
}

/** For JSON answers (`x_service.cost_millicents`): a number, exact to the 6 decimals it has. */
export function toMillicentsNumber(micros: MicroMillicents): number {
  return Number(toDecimalString(micros));
}

/** Whole millicents that cover a cost: what a hold must set aside. */
export function ceilMillicents(micros: MicroMillicents): number {
  return Number((micros + MICROS_PER_MILLICENT - 1n) / MICROS_PER_MILLICENT);
}
