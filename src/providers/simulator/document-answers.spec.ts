import { answerFromPassages, isSmallTalk } from './document-answers';

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

  it('quotes the sentences that share the most words with the question, naming their documents', () => {
    expect(answerFromPassages('What is the parking code for the north garage?', result)).toBe(
      'The staff parking code for the north garage is 7351. (from handbook.pdf)',
    );
    expect(answerFromPassages('Where do bicycles go?', result)).toBe('Bicycles go in the courtyard. (from rules.txt)');
    expect(answerFromPassages('When do the garages close, and where do visitors park?', result)).toBe(
      'Visitors park outside. The south garage closes at 22:00. (from handbook.pdf, rules.txt)',
    );
  });

  it('falls back on the opening of the best passage, and has nothing to say without passages', () => {
    expect(answerFromPassages('zebra?', result)).toBe('Welcome to the building. (from handbook.pdf)');
    expect(answerFromPassages('parking', 'No passage of the documents matches.')).toBeNull();
    expect(answerFromPassages('parking', 'file_search failed. Answer without it, or say that you could not look it up.')).toBeNull();
  });
});
