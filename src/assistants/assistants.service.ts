import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { EntityManager, Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { parseFileSearchOptions } from './documents/document-filters';
import { isSlug, MAX_SLUG_LENGTH } from '../common/validation/slug';
import { assertUuid } from '../common/validation/uuid';
import { ModelsService } from '../models/models.service';
import { TIERS, UNLIMITED } from '../limits/tier-policy';
import { ToolsService } from '../tools/tools.service';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { DocumentEmbeddings } from './documents/document-embeddings';
import { Assistant, AssistantTool, ServerToolType } from './entities/assistant.entity';
import { isUniqueViolation } from '../common/database/unique-violation';
import { ASSISTANT_CHUNKING, chunkingProblem } from './documents/chunking';

export interface AssistantFields {
  name?: string;
  slug?: string;
  description?: string;
  systemPrompt?: string;
  model?: string;
  /** The catalog id of an embedding model for its documents (the dense leg of file_search); null: the workspace's. */
  embeddingModel?: string | null;
  temperature?: number | null;
  maxTokens?: number | null;
  /** Tool names (`web_search`) or tools with settings (`{type: 'file_search', max_results: 8}`). */
  tools?: Array<ServerToolType | AssistantTool>;
  maxToolIterations?: number;
  /** Tokens per chunk of its documents (100 to 4,096) and shared with the chunk before (at most half): see chunking.ts. */
  chunkMaxTokens?: number;
  chunkOverlapTokens?: number;
}

/**
 * `model: "assistant/<slug or uuid>"` selects an assistant, for clients that always send a
 * model (LangChain, the AI SDK) and cannot add `assistant_id`; GET /v1/models lists them so.
 */

/**
 * Assistants of a workspace. Used by the CLI now and the dashboard later, and by the chat
 * service to resolve `assistant_id` (a UUID or a slug). Every command validates itself, so
 * each caller gets the same rules.
 */
@Injectable()
export class AssistantsService {
  constructor(
    @InjectRepository(Assistant) private readonly assistants: Repository<Assistant>,
    private readonly workspaces: WorkspacesService,
    private readonly models: ModelsService,
    private readonly tools: ToolsService,
    private readonly embeddings: DocumentEmbeddings,
  ) {}

  /** Enforces the tier's maxAssistants under a lock on the workspace, so concurrent creates cannot pass it. */
  async create(workspaceId: string, fields: AssistantFields, outerTransaction?: EntityManager): Promise<Assistant> {
    assertUuid(workspaceId, 'workspace');
    const name = fields.name?.trim();
    if (!name) throw ApiError.badRequest('An assistant needs a name.', 'name');
    if (!fields.model) throw ApiError.badRequest('An assistant needs a model.', 'model');
    const values = this.validated({ ...fields, name });

    // In the caller's transaction when given one: the first start's demo workspace and assistant commit together.
    const transaction = <T>(work: (manager: EntityManager) => Promise<T>): Promise<T> =>
      outerTransaction ? work(outerTransaction) : this.assistants.manager.transaction(work);
    return transaction(async (manager) => {
      const workspace = await this.workspaces.getLocked(manager, workspaceId);
      const limit = TIERS[workspace.tier].maxAssistants;
      const count = await manager.count(Assistant, { where: { workspaceId } });
      if (limit !== UNLIMITED && count >= limit) {
        throw ApiError.permissionDenied(
          `The ${workspace.tier} tier allows ${limit} assistant${limit === 1 ? '' : 's'} per workspace, and this workspace has ${count}. ` +
            'Upgrade the tier or delete an assistant.',
          'assistant_limit_reached',
        );
      }
      const slug = fields.slug !== undefined ? values.slug! : await this.freeSlug(manager, workspaceId, slugify(name));
      return this.saveUnique(manager, manager.create(Assistant, { ...values, slug, workspaceId }));
    });
  }

  async list(workspaceId: string): Promise<Assistant[]> {
    assertUuid(workspaceId, 'workspace');
    return this.assistants.find({ where: { workspaceId }, order: { createdAt: 'ASC' } });
  }

  /** An assistant of the workspace by UUID or slug; another workspace's is as unknown as a missing one. */
  async resolve(workspaceId: string, idOrSlug: string, param = 'assistant_id'): Promise<Assistant> {
    const where = isUUID(idOrSlug) ? { workspaceId, id: idOrSlug } : { workspaceId, slug: idOrSlug };
    const assistant = await this.assistants.findOneBy(where);
    if (!assistant) throw ApiError.notFound(`No assistant '${idOrSlug}' in this workspace.`, 'assistant_not_found', param);
    return assistant;
  }

  /** For operators: an assistant by id, whatever its workspace. */
  async get(assistantId: string): Promise<Assistant> {
    assertUuid(assistantId, 'assistant');
    const assistant = await this.assistants.findOneBy({ id: assistantId });
    if (!assistant) throw ApiError.notFound(`No assistant with id ${assistantId}.`, 'assistant_not_found');
    return assistant;
  }

  async update(assistantId: string, fields: AssistantFields): Promise<Assistant> {
    const assistant = await this.get(assistantId);
    if (fields.name !== undefined && !fields.name.trim()) throw ApiError.badRequest('The name cannot be empty.', 'name');
    const values = this.validated(fields, assistant);
    const embeddingModelChanged = values.embeddingModel !== undefined && values.embeddingModel !== assistant.embeddingModel;
    Object.assign(assistant, values);
    if (!embeddingModelChanged) return this.saveUnique(this.assistants.manager, assistant);
    // Its documents are embedded again with the new model, in the background.
    return this.assistants.manager.transaction(async (manager) => {
      const saved = await this.saveUnique(manager, assistant);
      await this.embeddings.modelChanged(manager, [saved.id]);
      return saved;
    });
  }

  async delete(assistantId: string): Promise<{ id: string; deleted: true }> {
    const assistant = await this.get(assistantId);
    await this.assistants.delete({ id: assistant.id });
    return { id: assistant.id, deleted: true };
  }

  /**
   * Checks the given fields and returns them as entity values; absent fields stay absent.
   * A chunk size or overlap is checked with the other's new or current value (`current`).
   */
  private validated(fields: AssistantFields, current?: Pick<Assistant, 'chunkMaxTokens' | 'chunkOverlapTokens'>): Partial<Assistant> {
    const values: Partial<Assistant> = {};
    if (fields.name !== undefined) values.name = fields.name.trim();
    if (fields.slug !== undefined) {
      if (!isSlug(fields.slug)) {
        throw ApiError.badRequest(
          `slug must be lowercase letters and digits in words joined by single hyphens, at most ${MAX_SLUG_LENGTH} characters.`,
          'slug',
        );
      }
      if (isUUID(fields.slug)) throw ApiError.badRequest('slug cannot have the form of a UUID.', 'slug');
      values.slug = fields.slug;
    }
    if (fields.description !== undefined) values.description = fields.description;
    if (fields.systemPrompt !== undefined) values.systemPrompt = fields.systemPrompt;
    if (fields.model !== undefined) values.model = this.models.chatModel(fields.model).id;
    if (fields.embeddingModel !== undefined) {
      values.embeddingModel = this.embeddings.checkSetting(fields.embeddingModel);
    }
    if (fields.temperature !== undefined && fields.temperature !== null) {
      if (!Number.isFinite(fields.temperature) || fields.temperature < 0 || fields.temperature > 2) {
        throw ApiError.badRequest('temperature must be a number from 0 to 2.', 'temperature');
      }
    }
    if (fields.temperature !== undefined) values.temperature = fields.temperature;
    if (fields.maxTokens !== undefined && fields.maxTokens !== null) {
      if (!Number.isInteger(fields.maxTokens) || fields.maxTokens < 1) {
        throw ApiError.badRequest('max_tokens must be a positive integer.', 'max_tokens');
      }
    }
    if (fields.maxTokens !== undefined) values.maxTokens = fields.maxTokens;
    if (fields.tools !== undefined) values.tools = parseTools(fields.tools, this.tools);
    if (fields.maxToolIterations !== undefined) {
      if (!Number.isInteger(fields.maxToolIterations) || fields.maxToolIterations < 1 || fields.maxToolIterations > 20) {
        throw ApiError.badRequest('max_tool_iterations must be an integer from 1 to 20.', 'max_tool_iterations');
      }
      values.maxToolIterations = fields.maxToolIterations;
    }
    if (fields.chunkMaxTokens !== undefined || fields.chunkOverlapTokens !== undefined) {
      const maxTokens = fields.chunkMaxTokens ?? current?.chunkMaxTokens ?? ASSISTANT_CHUNKING.maxTokens;
      const overlapTokens = fields.chunkOverlapTokens ?? current?.chunkOverlapTokens ?? ASSISTANT_CHUNKING.overlapTokens;
      const problem = chunkingProblem({ maxTokens, overlapTokens });
      if (problem) throw ApiError.badRequest(problem.message, problem.param);
      values.chunkMaxTokens = maxTokens;
      values.chunkOverlapTokens = overlapTokens;
    }
    return values;
  }

  /** The derived slug, or the first of `slug-2`, `slug-3`, ... that is free in the workspace. */
  private async freeSlug(manager: EntityManager, workspaceId: string, base: string): Promise<string> {
    const taken = new Set(
      (
        await manager
          .createQueryBuilder(Assistant, 'a')
          .select('a.slug', 'slug')
          .where('a.workspace_id = :workspaceId AND (a.slug = :base OR a.slug LIKE :pattern)', {
            workspaceId,
            base,
            pattern: `${base}-%`,
          })
          .getRawMany<{ slug: string }>()
      ).map((row) => row.slug),
    );
    if (!taken.has(base)) return base;
    for (let n = 2; ; n++) {
      const candidate = `${base.slice(0, MAX_SLUG_LENGTH - String(n).length - 1)}-${n}`;
      if (!taken.has(candidate)) return candidate;
    }
  }

  private async saveUnique(manager: EntityManager, assistant: Assistant): Promise<Assistant> {
    try {
      return await manager.save(assistant);
    } catch (error) {
      if (isUniqueViolation(error)) {
        throw ApiError.conflict(`The slug '${assistant.slug}' is already used by another assistant of this workspace.`, 'slug_taken');
      }
      throw error;
    }
  }
}

/** "Support Bot (EU)!" -> "support-bot-eu"; a name with no letters or digits gives "assistant". */
export function slugify(name: string): string {
  const slug = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, MAX_SLUG_LENGTH)
    .replace(/-+$/g, '');
  return slug && !isUUID(slug) ? slug : 'assistant';
}

const FILE_SEARCH_OPTIONS = ['max_num_results', 'ranking_options', 'filters'] as const;

/** Each tool must be a registered server tool (ToolsService), once, with settings it takes. */
function parseTools(tools: Array<ServerToolType | AssistantTool>, registered: ToolsService): AssistantTool[] {
  const parsed = tools.map((tool, index) => {
    const value: AssistantTool = typeof tool === 'string' ? { type: tool } : { ...tool };
    if (!registered.isRegistered(value.type)) {
      throw ApiError.badRequest(`tools.${index} must be one of ${registered.names().join(', ')} (got "${value.type}").`, `tools.${index}`);
    }
    if (value.max_results !== undefined && (!Number.isInteger(value.max_results) || value.max_results < 1 || value.max_results > 20)) {
      throw ApiError.badRequest('max_results must be an integer from 1 to 20.', `tools.${index}.max_results`);
    }
    // file_search takes OpenAI's options, stored as checked (a filter cut to its known fields); no other tool has them.
    const { max_num_results: _count, ranking_options: _ranking, filters: _filters, ...rest } = value;
    if (value.type === 'file_search') return { ...rest, ...parseFileSearchOptions(value as unknown as Record<string, unknown>, `tools.${index}`) };
    const misplaced = FILE_SEARCH_OPTIONS.find((option) => value[option] !== undefined && value[option] !== null);
    if (misplaced) throw ApiError.badRequest(`${misplaced} is an option of file_search only.`, `tools.${index}.${misplaced}`);
    return value;
  });
  if (new Set(parsed.map((tool) => tool.type)).size !== parsed.length) {
    throw ApiError.badRequest('Each tool may appear once.', 'tools');
  }
  return parsed;
}
