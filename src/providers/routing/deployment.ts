import { type AppConfig, UPSTREAM_PROVIDERS } from '../../config/app-config';
import type { DeploymentDefinition, ModelDefinition } from '../../models/model-catalog';
import type { ProviderAdapter } from '../provider-adapter';
import { PROVIDERS } from '../provider-registry';

/** One place a catalog model is served, ready to call. */
export interface Deployment {
  /** `<model>/<label>`: unique in the service; health, budgets and metrics are kept under it. */
  readonly id: string;
  readonly label: string;
  readonly model: ModelDefinition;
  /**
   * The model as this deployment serves it: its provider, upstream name and prices. Adapters
   * are given this one (they send `upstreamModel`), and a call it answers is billed at its prices.
   */
  readonly served: ModelDefinition;
  readonly adapter: ProviderAdapter;
  readonly weight: number;
  readonly rpm?: number;
  readonly tpm?: number;
  readonly region?: string;
  readonly timeoutMs: number;
  /** Where its key comes from, for the CLI (never the key). */
  readonly keySource: string;
  readonly baseUrl?: string;
}

/**
 * The deployments of every upstream model of the catalog. A model without `deployments` gets
 * one from its provider's single-key variables (OPENAI_API_KEY, ...), labelled with the
 * provider's name, or none when that provider has no key (the simulator may stand in).
 * Adapters are shared by deployments with the same provider, URL and key: one connection pool each.
 */
export function buildDeployments(models: readonly ModelDefinition[], config: AppConfig): Map<string, Deployment[]> {
  const adapters = new Map<string, ProviderAdapter>();
  const adapterFor = (definition: Pick<DeploymentDefinition, 'provider' | 'baseUrl' | 'apiKey'>): ProviderAdapter => {
    const key = JSON.stringify([definition.provider, definition.baseUrl ?? '', definition.apiKey]);
    let adapter = adapters.get(key);
    if (!adapter) {
      const entry = PROVIDERS.find((p) => p.name === definition.provider)!;
      adapter = entry.create({ apiKey: definition.apiKey, baseUrl: definition.baseUrl, timeoutMs: config.upstreamTimeoutMs });
      adapters.set(key, adapter);
    }
    return adapter;
  };
  const byModel = new Map<string, Deployment[]>();
  for (const model of models) {
    if (model.provider === 'simulator') continue;
    const definitions = model.deployments ?? singleKeyDeployment(model, config);
    if (definitions.length === 0) continue;
    byModel.set(
      model.id,
      definitions.map((d) => ({
        id: `${model.id}/${d.label}`,
        label: d.label,
        model,
        served: {
          ...model,
          provider: d.provider,
          upstreamModel: d.upstreamModel,
          ...(d.prices ?? {}),
        },
        adapter: adapterFor(d),
        weight: d.weight,
        rpm: d.rpm,
        tpm: d.tpm,
        region: d.region,
        timeoutMs: d.timeoutMs ?? config.upstreamTimeoutMs,
        keySource: d.keySource,
        baseUrl: d.baseUrl,
      })),
    );
  }
  return byModel;
}

function singleKeyDeployment(model: ModelDefinition, config: AppConfig): DeploymentDefinition[] {
  const provider = model.provider as Exclude<ModelDefinition['provider'], 'simulator'>;
  const { apiKey, baseUrl } = config.providers[provider];
  if (!apiKey) return [];
  const prefix = UPSTREAM_PROVIDERS.find(([name]) => name === provider)![1];
  return [{ label: provider, provider, apiKey, baseUrl, keySource: `env ${prefix}_API_KEY`, upstreamModel: model.upstreamModel, weight: 1 }];
}
