/** Why a file could not be read, as a code the reader's caller maps to words for the uploader. */
export type DocumentReadFailure =
  /** Not what its type says, or damaged. */
  | 'invalid'
  | 'encrypted'
  /** Unpacks (a DOCX, a PDF's compressed streams) to more than the limit, or at a bomb's ratio. */
  | 'too_large_unpacked'
  /** HTML nested deeper than the reader follows. */
  | 'too_deep'
  /** More text than a document may have. */
  | 'too_much_text'
  | 'timeout'
  | 'memory'
  | 'failed';

/**
 * A file that could not be read, with a message that finishes the sentence
 * "<file> could not be read: ..." for the person who uploaded it. Plain data (no Nest), so
 * that the reader's worker thread can make and post it.
 */
export class DocumentReadError extends Error {
  constructor(
    readonly reason: DocumentReadFailure,
    message: string,
  ) {
    super(message);
    this.name = 'DocumentReadError';
  }
}

const MB = 1024 * 1024;

/** "50 MB": the limits are whole megabytes. */
export function megabytes(bytes: number): string {
  return `${Math.round((bytes / MB) * 10) / 10} MB`;
}
