import { Injectable } from '@nestjs/common';
import { ApiError } from '../common/errors/api-error';
import { registerSecrets } from '../common/secrets';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { DEFAULT_CATALOG, loadCatalogFile, ModelDefinition } from './model-catalog';

/** The curated model catalog, loaded once at start (a bad catalog file stops the start). */
@Injectable()
export class ModelsService {
  private readonly models: readonly ModelDefinition[];
  private readonly byId: ReadonlyMap<string, ModelDefinition>;
  /** Every name a request may give a model: its id and its aliases (unique, model-catalog.ts checks it). */
  private readonly byName: ReadonlyMap<string, ModelDefinition>;

  constructor(@InjectConfig() config: AppConfig) {
    this.models = config.modelCatalogFile ? loadCatalogFile(config.modelCatalogFile) : DEFAULT_CATALOG;
    // The deployments' keys: masked in client messages and logs (an upstream may echo the key it got).
    registerSecrets(this.models.flatMap((model) => (model.deployments ?? []).map((deployment) => deployment.apiKey)));
    this.byId = new Map(this.models.map((m) => [m.id, m]));
    this.byName = new Map(this.models.flatMap((m) => [[m.id, m] as const, ...(m.aliases ?? []).map((alias) => [alias, m] as const)]));
  }

  list(): readonly ModelDefinition[] {
    return this.models;
  }

  /** A model by its id only: what is stored (a key's allowed models, nerfing rules) names models by id. */
  find(id: string): ModelDefinition | undefined {
    return this.byId.get(id);
  }

  /** The model a request names, by its id or one of its aliases. */
  resolve(name: string): ModelDefinition | undefined {
    return this.byName.get(name);
  }

  /**
   * The model a request names, by its id or an alias: every request path (chat completions,
   * Responses, Messages, count_tokens) comes through here, and goes on with the model's id.
   * @throws 404 `not_found` with code `model_not_found`, as OpenAI answers an unknown model.
   */
  get(id: string, param = 'model'): ModelDefinition {
    const found = this.byName.get(id);
    if (!found) {
      throw ApiError.notFound(`The model '${id}' does not exist. GET /v1/models lists the models available.`, 'model_not_found', param);
    }
    return found;
  }
}
