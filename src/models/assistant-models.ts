import type { ModelDto } from './dto/model.dto';

/** `model: "assistant/<slug>"` runs the workspace's assistant `<slug>`, for clients that always send a model. */
export const ASSISTANT_MODEL_PREFIX = 'assistant/';

/** The assistant a `model` value names, or undefined when it names a catalog model. */
export function assistantOfModel(model: string | undefined): string | undefined {
  return model?.startsWith(ASSISTANT_MODEL_PREFIX) ? model.slice(ASSISTANT_MODEL_PREFIX.length) : undefined;
}

/**
 * The workspace's assistants as model entries of `GET /v1/models`. Declared here and
 * provided by the assistants module (which imports models/, never the reverse).
 */
export const ASSISTANT_MODELS = Symbol('ASSISTANT_MODELS');

export interface AssistantModels {
  /** The workspace's assistants that can run (their model is in the catalog). */
  list(workspaceId: string): Promise<ModelDto[]>;
  /** One assistant by slug or id; a 404 when the workspace has none such. */
  get(workspaceId: string, ref: string): Promise<ModelDto>;
}
