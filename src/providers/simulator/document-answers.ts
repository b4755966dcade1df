// How the simulator behaves with an assistant's documents: it searches them for any question
// that is not small talk (as a real model given file_search would), and answers with the
// sentences of the returned passages that share the most words with the question.

/** The name of the assistant's document search among the offered tools. */
export const DOCUMENT_SEARCH_TOOL = 'file_search';
/** The name of the web search among the offered tools. */
export const WEB_SEARCH_TOOL = 'web_search';

/** Words of greetings, thanks and chit-chat: a message made only of these asks nothing of the documents. */
const SMALL_TALK_WORDS = new Set(
  (
    'hi hello hey hiya howdy yo greetings good morning afternoon evening day night bye goodbye see you later cheers ' +
    'thanks thank thx ty much very so a lot ok okay k cool great nice awesome perfect fine sure yes yeah yep no nope ' +
    'how are is it going doing what s up sup there all everyone folks well i m am and the to lol haha please welcome'
  ).split(' '),
);

/**
 * Whether a message is small talk ("Hello!", "thanks a lot", "how are you?"): empty, or
 * made only of small-talk words. Anything else may be a question about the documents.
 */
export function isSmallTalk(text: string): boolean {
  if (text.length > SMALL_TALK_MAX_CHARS) return false;
  return wordsOf(text).every((word) => SMALL_TALK_WORDS.has(word));
}

/** Longer than this, a message is not small talk (and is never read whole for it). */
const SMALL_TALK_MAX_CHARS = 200;
/** The question's words are read from its beginning only: a long prompt weighs in by its first words. */
const QUESTION_CHARS = 4_000;

/** Words that say nothing of what the question is about. */
const STOP_WORDS = new Set(
  (
    'a an the and or but of to in on at by for with from about as into is are was were be been being do does did ' +
    'what when where who whom which why how can could should would will shall may might must i me my we our you your ' +
    'it its this that these those there here use please tell say says said any some file_search document documents'
  ).split(' '),
);

/** One passage of a file_search result: the number it is cited by, its document's name and its text. */
interface Passage {
  number: string;
  documentName: string;
  content: string;
}

/** Sentences an answer quotes at most, and its length: enough for the fact, short as a chat answer. */
const MAX_SENTENCES = 3;
const MAX_ANSWER_CHARS = 400;

/**
 * The simulator's answer from what file_search returned for `question`: the passages'
 * sentences that share the most words with it (in the documents' order), each followed by
 * its passage's citation marker (`[2]`), as a model asked to cite does, then the names of
 * their documents. Null when the result holds no passage (nothing matched, or the search failed).
 */
export function answerFromPassages(question: string, toolResult: string): string | null {
  const passages = passagesOf(toolResult);
  if (passages.length === 0) return null;
  const asked = new Set(termsOf(question.slice(0, QUESTION_CHARS)));
  const sentences = passages.flatMap((passage, passageIndex) =>
    sentencesOf(passage.content).map((text, index) => ({
      text,
      number: passage.number,
      documentName: passage.documentName,
      order: passageIndex * 100_000 + index,
      score: new Set(termsOf(text).filter((term) => asked.has(term))).size,
    })),
  );
  const best = [...sentences].sort((a, b) => b.score - a.score || a.order - b.order);
  // Sentences more than half as close as the best one are quoted too; without a shared word,
  // the best passage's opening is the answer: it is what the search ranked first.
  const top = best[0].score;
  const chosen = top > 0 ? best.filter((sentence) => sentence.score * 2 > top).slice(0, MAX_SENTENCES) : best.slice(0, 1);
  chosen.sort((a, b) => a.order - b.order);
  const quoted: typeof chosen = [];
  let length = 0;
  for (const sentence of chosen) {
    if (quoted.length > 0 && length + sentence.text.length > MAX_ANSWER_CHARS) break;
    quoted.push(sentence);
    length += sentence.text.length + 1;
  }
  const cut = (text: string) => (text.length > MAX_ANSWER_CHARS ? `${text.slice(0, MAX_ANSWER_CHARS - 1)}…` : text);
  const text = quoted.map((sentence) => `${cut(sentence.text)} [${sentence.number}]`).join(' ');
  const names = [...new Set(quoted.map((sentence) => sentence.documentName))];
  return `${text} (from ${names.join(', ')})`;
}

/**
 * The passages of a file_search result, as FileSearchTool formats them for the model:
 * `[1] name, passage 3\n<text>`, separated by `---` lines. Anything else holds none.
 */
function passagesOf(toolResult: string): Passage[] {
  return toolResult.split(/\n\n---\n\n/).flatMap((block) => {
    const match = /^\[(\d+)\] (.+), passage \d+\n([\s\S]*)$/.exec(block);
    return match && match[3].trim() ? [{ number: match[1], documentName: match[2], content: match[3] }] : [];
  });
}

/** Web results an answer names at most. */
const MAX_WEB_RESULTS = 3;

/**
 * The simulator's answer from what web_search returned: the titles of its first results,
 * each with its citation marker. Null when the result holds none (no results, or the search failed).
 */
export function answerFromWebResults(toolResult: string): string | null {
  const results = [...toolResult.matchAll(/^\[(\d+)\] (.+)\n\s+https?:\/\/\S+$/gm)].slice(0, MAX_WEB_RESULTS);
  return results.length ? results.map((match) => `${match[2].slice(0, 200)} [${match[1]}]`).join('; ') : null;
}

function sentencesOf(text: string): string[] {
  return text
    .split(/(?<=[.!?])\s+|\n+/)
    .map((sentence) => sentence.replace(/\s+/g, ' ').trim())
    .filter((sentence) => sentence.length > 0);
}

/** The words that say what a text is about, plurals and third persons made singular ("garages" and "closes" as "garage" and "close"). */
function termsOf(text: string): string[] {
  return wordsOf(text)
    .filter((word) => !STOP_WORDS.has(word))
    .map((word) => (word.length > 3 && word.endsWith('s') && !word.endsWith('ss') ? word.slice(0, -1) : word));
}

/** Lower-case words (letters, digits, `_`), for comparing a question with a text. */
function wordsOf(text: string): string[] {
  return text.toLowerCase().match(/[\p{L}\p{N}_]+/gu) ?? [];
}
