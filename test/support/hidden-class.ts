import { setFlagsFromString } from 'node:v8';

// V8's own test of whether two objects share a hidden class (map); its syntax is allowed from here on.
setFlagsFromString('--allow-natives-syntax');

/** Whether `a` and `b` have one hidden class (V8's %HaveSameMap). */
export const sameHiddenClass = new Function('a', 'b', 'return %HaveSameMap(a, b)') as (a: object, b: object) => boolean;
