import { Injectable } from '@nestjs/common';
import { AssistantModels } from '../models/assistant-models';
import { ModelDto } from '../models/dto/model.dto';
import { ModelsService } from '../models/models.service';
import { AssistantsService } from './assistants.service';

/** The workspace's assistants as `assistant/<slug>` entries of `GET /v1/models`. */
@Injectable()
export class AssistantModelEntries implements AssistantModels {
  constructor(
    private readonly assistants: AssistantsService,
    private readonly models: ModelsService,
  ) {}

  async list(workspaceId: string): Promise<ModelDto[]> {
    const assistants = await this.assistants.list(workspaceId);
    // An assistant whose model left the catalog cannot run: it is not offered.
    return assistants.flatMap((assistant) => {
      const model = this.models.find(assistant.model);
      return model ? [ModelDto.fromAssistant(assistant, model)] : [];
    });
  }

  async get(workspaceId: string, ref: string): Promise<ModelDto> {
    const assistant = await this.assistants.resolve(workspaceId, ref, 'id');
    return ModelDto.fromAssistant(assistant, this.models.get(assistant.model));
  }
}
