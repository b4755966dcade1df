import { Controller, Headers, HttpCode, Post, Req, type RawBodyRequest } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { Public } from '../common/auth/auth.decorators';
import type { ApiRequest } from '../common/http/request-context';
import { StripeWebhookService } from './stripe-webhook.service';

/**
 * Called by Stripe, not by API users: no API key (the signature authenticates it), and
 * left out of the API documentation. The app keeps the raw bytes of JSON bodies
 * (`keepRawBody` in app.factory.ts), which the signature is computed over.
 */
@ApiExcludeController()
@Controller('v1/payments/stripe')
export class StripeWebhookController {
  constructor(private readonly webhooks: StripeWebhookService) {}

  @Public()
  @Post('webhook')
  @HttpCode(200)
  receive(
    @Req() req: RawBodyRequest<ApiRequest>,
    @Headers('stripe-signature') signature: string | undefined,
  ): Promise<{ received: true }> {
    return this.webhooks.handle(req.rawBody, signature);
  }
}
