import { Controller, Get, Req, Res } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Request, Response } from 'express';
import { Public } from '../common/auth/auth.decorators';
import { buildWidgetScript, WidgetScript } from './widget-script';

/**
 * `GET /widget.js`: the script of the embed tag, loadable from any website (it holds no
 * secret; the widget's endpoints check the origin). Cached for a few minutes and then
 * revalidated by its ETag, so that a new version reaches pages soon after a deploy.
 */
@ApiExcludeController()
@Public()
@Controller()
export class WidgetScriptController {
  private readonly script: WidgetScript = buildWidgetScript();

  @Get('widget.js')
  serve(@Req() req: Request, @Res() res: Response): void {
    res.setHeader('Content-Type', 'text/javascript; charset=utf-8');
    res.setHeader('Cache-Control', 'public, max-age=300, must-revalidate');
    res.setHeader('ETag', this.script.etag);
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Cross-Origin-Resource-Policy', 'cross-origin');
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.vary('Accept-Encoding');
    if (req.headers['if-none-match'] === this.script.etag) {
      res.status(304).end();
      return;
    }
    const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    if (gzip) res.setHeader('Content-Encoding', 'gzip');
    res.send(gzip ? this.script.gzipped : this.script.body);
  }
}
