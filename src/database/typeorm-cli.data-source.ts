import { DataSource } from 'typeorm';
import { dataSourceOptions } from './data-source';

/**
 * For TypeORM's own CLI (`npx typeorm migration:generate -d dist/src/database/typeorm-cli.data-source.js`).
 * Needs DATABASE_URL; start the app once to get the embedded server's URL in its log.
 */
if (!process.env.DATABASE_URL) throw new Error('Set DATABASE_URL to use the TypeORM CLI');
export default new DataSource(dataSourceOptions(process.env.DATABASE_URL));
