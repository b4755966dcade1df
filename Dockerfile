# Production image of the Assistant Chat Service.
#
#   docker build -t assistant-chat-service .
#   docker run -p 3000:3000 -e DATABASE_URL=postgres://user:pass@db-host:5432/assistant_chat \
#     -e REDIS_URL=redis://redis-host:6379 assistant-chat-service
#
# In production, run it with DATABASE_URL set to a real PostgreSQL (see docker-compose.yml).
# The embedded PostgreSQL used when DATABASE_URL is unset is for laptops. It does not work
# in this image, on purpose: /app belongs to root and is read-only for the `node` user, so
# without DATABASE_URL the service stops at start-up with "EACCES: permission denied,
# mkdir '/app/.data'". Otherwise it would quietly keep the wallet in the container's
# throw-away layer. The embedded binaries' install script is also skipped (see below).
#
# Migrations run at start-up under a PostgreSQL advisory lock, so several replicas can
# start at the same time. Node runs as PID 1: run the container with an init process
# (`docker run --init`, `init: true` in Compose) so SIGTERM also stops it during start-up,
# before the service installs its own SIGTERM handler.

# ---- build: install everything, compile, then drop the dev dependencies ----
FROM node:24-bookworm-slim AS build
WORKDIR /app

# Install scripts are skipped, as with npm 11 (the npm bundled with node:24 is 11.x, but say
# it). Nothing needs them to build or run against DATABASE_URL. The only one in the
# production tree links the embedded PostgreSQL's libraries, which this image does not use.
# The dev dependency `node` (the Node.js that npm scripts run outside the image) installs
# its binary in one of them, so here the image's own Node.js 24 runs every script.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund

# .dockerignore keeps node_modules, dist, .data, .git, .env files and the like out.
COPY . .
RUN npm run build \
 && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

# ---- runtime: compiled output and production dependencies only ----
FROM node:24-bookworm-slim AS runtime
# NO_COLOR: Nest's logger writes ANSI colour codes even without a terminal; log collectors want plain text.
ENV NODE_ENV=production \
    NO_COLOR=1
WORKDIR /app

# Copied as root-owned files: the `node` user can read them but not change them.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
# dist/src is the app and the operator CLI; dist/migrations is compiled in and imported
# by the code, so nothing else (no .ts, no SQL files) is needed at run time.
COPY --from=build /app/dist ./dist
# DATA_DIR (./.data), the one place the service writes: the settlement journal, which a
# restarted container reads back (SETTLEMENT_DURABILITY, README "How a request is billed").
RUN mkdir -p /app/.data && chown node:node /app/.data

USER node
EXPOSE 3000

# Liveness probe: GET /health (no curl in slim images, so node's own fetch). Use
# GET /health/ready in a load balancer to also check the database.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# Operator CLI in the container: node dist/src/cli.js <command> (`npm run cli` needs the compiler).
CMD ["node", "dist/src/main.js"]
