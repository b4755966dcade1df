import { Injectable } from '@nestjs/common';
import { ApiError } from '../common/errors/api-error';
import { registerSecrets } from '../common/secrets';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { DEFAULT_CATALOG, isChatModel, loadCatalogFile, ModelDefinition } from './model-catalog';

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

  /** The models that answer chats: what an assistant or the playground may run. */
  chatModels(): readonly ModelDefinition[] {
    return this.models.filter(isChatModel);
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

  /**
   * A model that answers chats, by its id or an alias: what chat completions, Responses,
   * Messages and count_tokens run. An embedding model is refused with a 400 naming `param`.
   */
  chatModel(id: string, param = 'model'): ModelDefinition {
    const model = this.get(id, param);
    if (!isChatModel(model)) {
      throw ApiError.badRequest(`${model.id} is an embedding model: use it with POST /v1/embeddings, and a chat model here (GET /v1/models lists their kinds).`, param, 'wrong_model_kind');
    }
    return model;
  }

  /** A model that makes embeddings (`POST /v1/embeddings`); a chat model is refused with a 400 naming `param`. */
  embeddingModel(id: string, param = 'model'): ModelDefinition {
    const model = this.get(id, param);
    if (isChatModel(model)) {
      throw ApiError.badRequest(`${model.id} is a chat model: POST /v1/embeddings takes an embedding model (GET /v1/models lists their kinds).`, param, 'wrong_model_kind');
    }
    return model;
  }
}
