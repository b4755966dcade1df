import { HttpException, Injectable } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import type { ErrorPageRenderer } from '../common/errors/error-pages';
import type { ApiRequest } from '../common/http/request-context';
import { isPagePath } from './dashboard.setup';
import { SignInRequired } from './dashboard.guard';
import type { PageRequest } from './page-request';
import { PagesService } from './pages.service';

const TITLES: Record<number, string> = {
  400: 'That did not work',
  403: 'Not allowed',
  404: 'Page not found',
  429: 'Too many attempts',
  503: 'Temporarily unavailable',
};

/**
 * Errors of page requests as pages that look like the rest and leak nothing: a 404 for
 * what does not exist or is not yours, a 403 for a role that is not enough, a 500 with
 * only the request id. A request whose session is over goes to the sign-in page (htmx
 * requests by `HX-Redirect`), and comes back to where it was afterwards.
 */
@Injectable()
export class ErrorPagesRenderer implements ErrorPageRenderer {
  constructor(private readonly pages: PagesService) {}

  /**
   * Page paths asked for by a browser (or htmx). A program that calls a wrong path without
   * `/v1` (`curl /chat/completions`) still gets the API's JSON error.
   */
  handles(req: ApiRequest): boolean {
    if (!isPagePath(req.path)) return false;
    return req.headers['hx-request'] === 'true' || req.accepts(['json', 'html']) === 'html';
  }

  async render(exception: unknown, error: ApiError, apiRequest: ApiRequest, res: Response): Promise<void> {
    const req = apiRequest as PageRequest;
    const htmx = req.headers['hx-request'] === 'true';
    if (exception instanceof SignInRequired) {
      const back = req.method === 'GET' && !htmx ? req.originalUrl.slice(req.basePath.length) : (htmxPage(req) ?? '/');
      const to = `${req.basePath}/login${back && back !== '/' ? `?next=${encodeURIComponent(back)}` : ''}`;
      if (htmx) {
        res.status(200).setHeader('HX-Redirect', to).end();
      } else {
        res.redirect(303, to);
      }
      return;
    }
    const status = error.status;
    const message =
      status === 404
        ? 'There is nothing here, or it is not yours to see.'
        : status >= 500
          ? `Something went wrong on our side. If it keeps happening, tell your operator this request id: ${req.id}.`
          : exception instanceof HttpException || exception instanceof ApiError
            ? error.message
            : 'That did not work.';
    const title = TITLES[status] ?? (status >= 500 ? 'Something went wrong' : 'That did not work');
    if (htmx) {
      // Shown in the page's message area instead of replacing what the person was looking at.
      res.setHeader('HX-Retarget', '#flash-area');
      res.setHeader('HX-Reswap', 'innerHTML');
      const html = await this.pages.fragment('partials/flash', { flash: [{ kind: 'error', text: `${title}: ${message}` }] });
      res.status(status).type('html').send(html);
      return;
    }
    await this.pages.render(req, res, 'error', { title, message, status }, status);
  }
}

/** The page an htmx request was made from (HX-Current-URL), as a path inside the dashboard. */
function htmxPage(req: PageRequest): string | null {
  const current = req.headers['hx-current-url'];
  if (typeof current !== 'string') return null;
  try {
    const url = new URL(current);
    const path = url.pathname.startsWith(req.basePath) ? url.pathname.slice(req.basePath.length) : url.pathname;
    return path + url.search;
  } catch {
    return null;
  }
}
