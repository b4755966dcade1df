// Shared with GET /v1/models and the body parser's refusals, which answer in Anthropic's shape too.
export * from '../common/errors/anthropic-errors';
