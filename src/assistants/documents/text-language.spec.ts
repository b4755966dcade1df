import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { detectTextLanguage } from './text-language';

describe('detectTextLanguage', () => {
  const corpus = path.join(__dirname, '..', '..', '..', 'test', 'retrieval', 'corpus');
  const read = (name: string) => readFileSync(path.join(corpus, name), 'utf8');

  it.each([
    ['recette-tarte-aux-pommes.md', 'french'],
    ['politique-de-teletravail.md', 'french'],
    ['fahrrad-reparatur.md', 'german'],
    ['mietvertrag-hinweise.md', 'german'],
    ['guia-de-viaje-madrid.md', 'spanish'],
    ['politica-de-devoluciones.md', 'spanish'],
    ['router-xj9000-manual.md', 'english'],
  ])('%s is %s', (name, language) => {
    expect(detectTextLanguage(read(name))).toBe(language);
  });

  it('finds English in every English document of the retrieval corpus', () => {
    const english = readdirSync(corpus).filter((name) => detectTextLanguage(read(name)) === 'english');
    expect(english.length).toBe(readdirSync(corpus).length - 10);
  });

  it('reads Italian, Portuguese and Dutch prose', () => {
    expect(detectTextLanguage('Il treno per Milano parte alle otto e non si ferma nelle stazioni della costa. Anche questo è un treno veloce, che arriva prima degli altri e costa di più per chi non ha un abbonamento.')).toBe('italian');
    expect(detectTextLanguage('O comboio para Lisboa parte às oito e não para nas estações da costa. Também é mais rápido que os outros, e o bilhete custa mais pelo conforto dos lugares em primeira classe.')).toBe('portuguese');
    expect(detectTextLanguage('De trein naar Amsterdam vertrekt om acht uur en stopt niet op de kleine stations. Het is ook een snelle trein, die eerder aankomt dan de andere en meer kost voor wie geen abonnement heeft.')).toBe('dutch');
  });

  it('says simple for a text too short, a list of numbers, or a language it does not know', () => {
    expect(detectTextLanguage('Returns within 30 days')).toBe('simple');
    expect(detectTextLanguage(Array.from({ length: 100 }, (_, i) => `SKU-${i} ${i * 3} EUR`).join('\n'))).toBe('simple');
    expect(detectTextLanguage('Zug nach Berlin '.repeat(2) + 'Поезд отправляется в восемь часов и не останавливается на маленьких станциях по дороге к морю, потому что он скорый.')).toBe('simple');
  });
});
