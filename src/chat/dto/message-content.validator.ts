import { registerDecorator, ValidationArguments } from 'class-validator';

/**
 * Message content as OpenAI takes it: a string, null (an assistant message that only
 * calls tools), or an array of text and image parts.
 */
export function IsMessageContent(): PropertyDecorator {
  return (target, propertyName) =>
    registerDecorator({
      name: 'isMessageContent',
      target: target.constructor,
      propertyName: propertyName as string,
      validator: {
        validate: (value: unknown) => contentProblem(value) === null,
        defaultMessage: (args: ValidationArguments) => `content ${contentProblem(args.value)}`,
      },
    });
}

function contentProblem(value: unknown): string | null {
  if (value === undefined || value === null || typeof value === 'string') return null;
  if (!Array.isArray(value)) return 'must be a string or an array of content parts';
  if (value.length === 0) return 'must not be an empty array: send a string, or at least one content part';
  for (const [index, part] of value.entries()) {
    const p = part as { type?: unknown; text?: unknown; image_url?: { url?: unknown } };
    if (p?.type === 'text') {
      if (typeof p.text !== 'string') return `part ${index} of type text needs a string "text"`;
    } else if (p?.type === 'image_url') {
      if (typeof p.image_url?.url !== 'string') return `part ${index} of type image_url needs "image_url": {"url": "..."}`;
    } else {
      return `part ${index} has an unsupported type ${JSON.stringify(p?.type)} (supported: text, image_url)`;
    }
  }
  return null;
}
