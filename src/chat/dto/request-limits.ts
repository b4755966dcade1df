/**
 * Size limits of a chat request, OpenAI's documented ones, checked before any other work is
 * done on the body (validation, token counting, the provider call). Exceeding one is a
 * `400 bad_request` whose `param` names the field and whose `code` says which limit it is.
 * The body itself is limited by BODY_LIMIT (10 MB by default: 413 `request_too_large`).
 */

/** Messages in one request (code `array_too_long`, param `messages`). */
export const MAX_MESSAGES = 2048;

/** Characters of one message's content, or of one text part (code `string_too_long`). */
export const MAX_MESSAGE_CONTENT_CHARS = 10_485_760;

/** Characters of one image part's URL, a data URL included: 20 MB per image (code `string_too_long`). */
export const MAX_IMAGE_URL_CHARS = 20 * 1024 * 1024;

/** Image parts in one request (code `too_many_images`, param `messages`). */
export const MAX_IMAGES_PER_REQUEST = 500;

/** Characters of all image URLs of one request: 50 MB per request (code `images_too_large`, param `messages`). */
export const MAX_IMAGE_URL_CHARS_PER_REQUEST = 50 * 1024 * 1024;

/** Function tools declared in one request (code `array_too_long`, param `tools`). */
export const MAX_TOOLS = 128;

/**
 * Characters of the `file_data` of all file parts of one request, data URL prefix included:
 * OpenAI's 32 MB of file content per request (code `files_too_large`, param `messages`).
 */
export const MAX_FILE_DATA_CHARS_PER_REQUEST = 32 * 1024 * 1024;

/** Characters of one input_audio part's base64 `data`: 20 MB, as an image (code `string_too_long`). */
export const MAX_AUDIO_DATA_CHARS = 20 * 1024 * 1024;
