import { setFlagsFromString } from 'node:v8';

/**
 * V8's allocation-site pretenuring, off for the server. V8 allocates the objects of a site
 * (an object literal, an array) directly in the old generation once most of them have
 * outlived a young collection, and keeps that decision. Under a burst (requests queued, so
 * their objects outlive collections) it decides so for sites of the request path; afterwards,
 * at an ordinary rate, those objects are born old, and every young object they point to is
 * kept by the young collections until a full one: at 200 streams/s after a saturated minute,
 * 2.95 MB/s went to the old generation (0.45 MB/s without the burst before), a full collection
 * came every 4 to 7 s, and each delayed some ten requests by 20 to 38 ms. Without pretenuring,
 * 0.15 MB/s and no full collection in 40 s (bench/README.md, "Results: one signal per upstream
 * call, and no pretenuring"). Set before anything else is loaded: `main.ts` imports this first.
 */
setFlagsFromString('--no-allocation-site-pretenuring');
