import { answerFromPassages, answerFromWebResults, isSmallTalk } from './document-answers';

describe('isSmallTalk', () => {
  it.each(['Hello!', 'hi there', 'Thanks a lot :)', 'How are you?', "what's up", 'Good morning, everyone', 'ok', ''])('%j is small talk', (text) => {
    expect(isSmallTalk(text)).toBe(true);
  });

  it.each(['What is the refund policy?', 'parking code', 'Hello, when is the generator tested?', `hello ${'hi '.repeat(100)}`])(
    '%j is a question',
    (text) => {
      expect(isSmallTalk(text)).toBe(false);
    },
  );
});

describe('answerFromPassages', () => {
  const result = [
    '[1] handbook.pdf, passage 2\nWelcome to the building. The staff parking code for the north garage is 7351.\nVisitors park outside.',
    '[2] rules.txt, passage 1\nThe south garage closes at 22:00. Bicycles go in the courtyard.',
  ].join('\n\n---\n\n');

  it('quotes the sentences that share the most words with the question, each cited by its passage number, naming their documents', () => {
    expect(answerFromPassages('What is the parking code for the north garage?', result)).toBe(
      'The staff parking code for the north garage is 7351. [1] (from handbook.pdf)',
    );
    expect(answerFromPassages('Where do bicycles go?', result)).toBe('Bicycles go in the courtyard. [2] (from rules.txt)');
    expect(answerFromPassages('When do the garages close, and where do visitors park?', result)).toBe(
      'Visitors park outside. [1] The south garage closes at 22:00. [2] (from handbook.pdf, rules.txt)',
    );
  });

  it('falls back on the opening of the best passage, and has nothing to say without passages', () => {
    expect(answerFromPassages('zebra?', result)).toBe('Welcome to the building. [1] (from handbook.pdf)');
    expect(answerFromPassages('parking', 'No passage of the documents matches.')).toBeNull();
    expect(answerFromPassages('parking', 'file_search failed. Answer without it, or say that you could not look it up.')).toBeNull();
  });
});

describe('answerFromWebResults', () => {
  it('names the first results with their citation markers, and has nothing to say without results', () => {
    const result = '[3] Node 24 is out\n    https://nodejs.org/24\n    Released today.\n\n[4] Changelog\n    https://nodejs.org/changelog\n\nCite the sources you use.';
    expect(answerFromWebResults(result)).toBe('Node 24 is out [3]; Changelog [4]');
    expect(answerFromWebResults('No web results.')).toBeNull();
  });
});
