import type { Response } from 'express';
import type { ApiRequest } from '../http/request-context';
import type { ApiError } from './api-error';

/** Provided by the dashboard: answers errors of page requests with pages instead of JSON. */
export const ERROR_PAGE_RENDERER = Symbol('ERROR_PAGE_RENDERER');

export interface ErrorPageRenderer {
  /** Whether this request is a page's (not the API's), and so gets a page. */
  handles(req: ApiRequest): boolean;
  /** `error` is what the API would have answered; `exception` what was thrown. */
  render(exception: unknown, error: ApiError, req: ApiRequest, res: Response): Promise<void>;
}
