import { registerDecorator, ValidationArguments } from 'class-validator';

/**
 * Message content as OpenAI takes it: a string, null (an assistant message that only
 * calls tools), or an array of text, image, file (a PDF) and audio parts.
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

/** What is wrong with a message's content, or null when nothing is. */
export function contentProblem(value: unknown): string | null {
  if (value === undefined || value === null || typeof value === 'string') return null;
  if (!Array.isArray(value)) return 'must be a string or an array of content parts';
  if (value.length === 0) return 'must not be an empty array: send a string, or at least one content part';
  for (const [index, part] of value.entries()) {
    const p = part as { type?: unknown; text?: unknown; image_url?: { url?: unknown }; file?: unknown; input_audio?: unknown };
    if (p?.type === 'text') {
      if (typeof p.text !== 'string') return `part ${index} of type text needs a string "text"`;
    } else if (p?.type === 'image_url') {
      if (typeof p.image_url?.url !== 'string') return `part ${index} of type image_url needs "image_url": {"url": "..."}`;
    } else if (p?.type === 'file') {
      if (!isFile(p.file)) return `part ${index} of type file needs "file": {"file_data": "data:...;base64,..."} or {"file_id": "..."}, with an optional string "filename"`;
    } else if (p?.type === 'input_audio') {
      if (!isAudio(p.input_audio)) return `part ${index} of type input_audio needs "input_audio": {"data": "<base64>", "format": "wav" or "mp3"}`;
    } else {
      return `part ${index} has an unsupported type ${JSON.stringify(p?.type)} (supported: text, image_url, file, input_audio)`;
    }
  }
  return null;
}

/** `{file_data?, file_id?, filename?}` with file_data or file_id, as OpenAI's file part. */
function isFile(file: unknown): boolean {
  if (typeof file !== 'object' || file === null || Array.isArray(file)) return false;
  const { file_data: data, file_id: id, filename } = file as Record<string, unknown>;
  const optionalString = (value: unknown) => value === undefined || value === null || typeof value === 'string';
  return (typeof data === 'string' || typeof id === 'string') && optionalString(data) && optionalString(id) && optionalString(filename);
}

export const AUDIO_FORMATS = ['wav', 'mp3'] as const;

function isAudio(audio: unknown): boolean {
  const { data, format } = (audio ?? {}) as { data?: unknown; format?: unknown };
  return typeof data === 'string' && (AUDIO_FORMATS as readonly unknown[]).includes(format);
}
