import { startTelemetry } from './telemetry-sdk';

// Imported first by main.ts: the SDK must be registered before `pg` is loaded, for its instrumentation to patch it.
startTelemetry();
