import { Controller, Get, Query } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { TransactionQueryDto, WalletDto, WalletTransactionDto, WalletTransactionPageDto } from './dto/wallet.dto';
import { AutoTopupSettingsService } from './auto-topup-settings.service';
import { WalletService } from './wallet.service';

@ApiTags('Wallet')
@Controller('v1/wallet')
export class WalletController {
  constructor(
    private readonly wallet: WalletService,
    private readonly autoTopup: AutoTopupSettingsService,
  ) {}

  @Get()
  @ApiStandardResponses({ ok: WalletDto })
  @ApiOperation({
    summary: 'Wallet balance',
    description: 'Field names in camelCase, no `data` wrapper. `autoTopup` appears once auto top-up was configured.',
  })
  async balance(@CurrentPrincipal() principal: Principal): Promise<WalletDto> {
    const [balance, autoTopup] = await Promise.all([
      this.wallet.balance(principal.workspaceId),
      this.autoTopup.summary(principal.workspaceId),
    ]);
    return autoTopup ? { ...balance, autoTopup } : balance;
  }

  @Get('transactions')
  @ApiStandardResponses({ ok: WalletTransactionPageDto, errors: [400] })
  @ApiOperation({ summary: 'Ledger of the wallet, newest first' })
  async transactions(
    @CurrentPrincipal() principal: Principal,
    @Query() query: TransactionQueryDto,
  ): Promise<WalletTransactionPageDto> {
    const page = await this.wallet.transactions(principal.workspaceId, {
      limit: query.limit ?? 20,
      startingAfter: query.starting_after,
      type: query.type,
    });
    return { ...page, data: page.data.map(WalletTransactionDto.from) };
  }
}
