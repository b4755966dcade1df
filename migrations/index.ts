import { Foundation1764000000000 } from './1764000000000-Foundation';
import { ChatBilling1764000100000 } from './1764000100000-ChatBilling';

/** Every migration, oldest first. Listed explicitly so the app, the CLI and the tests load the same set from .ts or .js. */
export const MIGRATIONS = [Foundation1764000000000, ChatBilling1764000100000];
