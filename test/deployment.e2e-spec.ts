import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { loadConfig } from '../src/config/app-config';
import { findHaproxy } from './support/load-balancer';

/**
 * The deployment files (docker-compose.yml with its `replicas` profile, deploy/haproxy,
 * the kustomize base in deploy/kubernetes) say what README "Running in production"
 * promises. There is no Docker or cluster here: the files are parsed and checked against
 * the service's own configuration, which is the part that drifts (a variable renamed or
 * added in src/config/app-config.ts must show up here, a secret must never sit in a ConfigMap).
 */
const ROOT = path.resolve(__dirname, '..');
const KUBERNETES = path.join(ROOT, 'deploy/kubernetes');

type Doc = Record<string, any>;

const readYaml = (file: string): Doc => parse(readFileSync(file, 'utf8')) as Doc;

/** Every variable the service reads: loadConfig run on an environment that records what is asked of it. */
function variablesTheServiceReads(): Set<string> {
  const read = new Set<string>();
  const env = new Proxy({} as Record<string, string | undefined>, {
    get: (_target, name) => {
      if (typeof name === 'string') read.add(name);
      return undefined;
    },
  });
  loadConfig(env);
  return read;
}

/** Credentials, or URLs that carry them (user:password@host). */
const CREDENTIAL_URLS = new Set(['DATABASE_URL', 'REDIS_URL', 'SMTP_URL']);
const isSecret = (name: string) => /(_KEY|SECRET|TOKEN|PASSWORD)$/.test(name) || CREDENTIAL_URLS.has(name);

describe('deployment files', () => {
  const variables = variablesTheServiceReads();
  const secrets = [...variables].filter(isSecret).sort();

  it('finds the service variables it checks against (the recording works)', () => {
    expect(variables.size).toBeGreaterThan(30);
    expect(secrets).toEqual(expect.arrayContaining(['DATABASE_URL', 'REDIS_URL', 'SESSION_SECRET', 'OPENAI_API_KEY', 'STRIPE_SECRET_KEY', 'STRIPE_WEBHOOK_SECRET', 'SMTP_URL']));
    expect(secrets).not.toContain('OPENAI_BASE_URL');
  });

  describe('docker-compose.yml, profile `replicas`', () => {
    const compose = readYaml(path.join(ROOT, 'docker-compose.yml'));
    const { app, replica, balancer } = compose.services as Record<string, Doc>;

    it('runs two replicas of the app image with the app settings, unpublished, behind a balancer of the same profile', () => {
      expect(replica.profiles).toEqual(['replicas']);
      expect(balancer.profiles).toEqual(['replicas']);
      expect(replica.deploy.replicas).toBe(2);
      expect(replica.image).toBe(app.image);
      expect(replica.environment).toEqual(app.environment);
      expect(replica.ports).toBeUndefined();
      expect(Object.keys(replica.depends_on).sort()).toEqual(['postgres', 'redis']);
      expect(replica.environment.REDIS_URL).toBe('redis://redis:6379');
      expect(replica.environment.SESSION_SECRET).toBe('${SESSION_SECRET:-}');
      expect(Object.keys(balancer.depends_on)).toEqual(['replica']);
      expect(balancer.ports).toEqual(['${LB_PORT:-8080}:8080']);
      // Longer than the stream drain, so Compose does not SIGKILL a replica draining its streams.
      expect(Number(/^(\d+)s$/.exec(replica.stop_grace_period)![1]) * 1000).toBeGreaterThan(loadConfig({}).shutdownDrainMs);
    });

    it('sets only variables the service reads', () => {
      const unknown = Object.keys(app.environment).filter((name) => !variables.has(name));
      expect(unknown).toEqual([]);
    });

    it("mounts a balancer configuration that exists and sends round robin to the replicas' port, checked on /health/ready", () => {
      const mounts = (balancer.volumes as string[]).map((volume) => volume.split(':'));
      expect(mounts).toHaveLength(1);
      const [source, target] = mounts[0];
      expect(target).toBe('/usr/local/etc/haproxy/haproxy.cfg');
      const file = path.join(ROOT, source);
      expect(existsSync(file)).toBe(true);
      const config = readFileSync(file, 'utf8');
      expect(config).toMatch(/^\s*bind :8080$/m);
      expect(config).toMatch(/^\s*balance roundrobin$/m);
      expect(config).toMatch(/^\s*option httpchk GET \/health\/ready$/m);
      expect(config).toMatch(/^\s*server-template replica \d+-\d+ replica:3000$/m);
      // Streams: no timeout shorter than the longest pause an upstream may make between chunks.
      for (const name of ['client', 'server']) {
        const seconds = Number(new RegExp(`^\\s*timeout ${name} (\\d+)s$`, 'm').exec(config)![1]);
        expect(seconds * 1000).toBeGreaterThan(loadConfig({}).upstreamIdleTimeoutMs);
      }
    });

    (findHaproxy() ? it : it.skip)('is a configuration HAProxy itself accepts (haproxy -c)', () => {
      const output = execFileSync(findHaproxy()!, ['-c', '-f', path.join(ROOT, 'deploy/haproxy/haproxy.cfg')], { encoding: 'utf8', stdio: 'pipe' });
      expect(output).toMatch(/Configuration file is valid/);
    });
  });

  describe('Kubernetes kustomize base (deploy/kubernetes)', () => {
    const kustomization = readYaml(path.join(KUBERNETES, 'kustomization.yaml'));
    const resources = (kustomization.resources as string[]).flatMap((file) =>
      parseAllDocuments(readFileSync(path.join(KUBERNETES, file), 'utf8')).map((doc) => doc.toJS() as Doc),
    );
    const byKind = (kind: string) => {
      const found = resources.filter((resource) => resource.kind === kind);
      expect(found).toHaveLength(1);
      return found[0];
    };
    const deployment = byKind('Deployment');
    const configMap = byKind('ConfigMap');
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];

    it('lists only files that exist, each with one resource', () => {
      expect(kustomization.kind).toBe('Kustomization');
      for (const file of kustomization.resources as string[]) expect(existsSync(path.join(KUBERNETES, file))).toBe(true);
      expect(resources.map((r) => r.kind).sort()).toEqual(['ConfigMap', 'Deployment', 'HorizontalPodAutoscaler', 'PodDisruptionBudget', 'Service']);
    });

    it('probes readiness on /health/ready and liveness on /health, on the container port', () => {
      expect(container.readinessProbe.httpGet).toEqual({ path: '/health/ready', port: 'http' });
      expect(container.livenessProbe.httpGet).toEqual({ path: '/health', port: 'http' });
      const httpPort = container.ports.find((port: Doc) => port.name === 'http');
      expect(httpPort.containerPort).toBe(Number(configMap.data.PORT));
    });

    it('gives a stopping pod a preStop delay, then more time than the stream drain deadline', () => {
      const [command, seconds] = container.lifecycle.preStop.exec.command as string[];
      expect(command).toBe('sleep');
      expect(Number(seconds)).toBeGreaterThanOrEqual(5);
      const drainSeconds = Number(configMap.data.SHUTDOWN_DRAIN_MS) / 1000;
      expect(drainSeconds).toBeGreaterThan(0);
      expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(Number(seconds) + drainSeconds);
    });

    it('asks for resources, and caps memory', () => {
      expect(container.resources.requests).toEqual({ cpu: expect.any(String), memory: expect.any(String) });
      expect(container.resources.limits.memory).toEqual(expect.any(String));
    });

    it('selects its pods alike in the Deployment, the Service, the HPA target and the PodDisruptionBudget', () => {
      const labels = deployment.spec.template.metadata.labels;
      expect(deployment.spec.selector.matchLabels).toEqual(labels);
      expect(byKind('Service').spec.selector).toEqual(labels);
      const pdb = byKind('PodDisruptionBudget');
      expect(pdb.spec.selector.matchLabels).toEqual(labels);
      expect(pdb.spec.minAvailable).toBeGreaterThanOrEqual(1);
      const hpa = byKind('HorizontalPodAutoscaler');
      expect(hpa.apiVersion).toBe('autoscaling/v2');
      expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata.name });
      // The budget can be met while pods are disrupted: more replicas than it keeps.
      expect(hpa.spec.minReplicas).toBeGreaterThan(pdb.spec.minAvailable);
    });

    it('reads every secret of the service from a Secret (secretKeyRef), and none from the ConfigMap', () => {
      const fromSecrets = (container.env as Doc[]).filter((variable) => variable.valueFrom?.secretKeyRef).map((variable) => variable.name as string);
      expect(fromSecrets.sort()).toEqual(secrets);
      for (const variable of container.env as Doc[]) {
        expect(variable.valueFrom.secretKeyRef).toEqual({ name: 'assistant-chat-service', key: variable.name, ...(variable.valueFrom.secretKeyRef.optional ? { optional: true } : {}) });
      }
      // Without these two the replicas cannot start or cannot share sessions: not optional.
      const required = (container.env as Doc[]).filter((variable) => !variable.valueFrom.secretKeyRef.optional).map((variable) => variable.name);
      expect(required.sort()).toEqual(['DATABASE_URL', 'SESSION_SECRET']);
      expect(Object.keys(configMap.data).filter(isSecret)).toEqual([]);
      expect(container.envFrom).toEqual([{ configMapRef: { name: configMap.metadata.name } }]);
    });

    it('has a ConfigMap of variables the service reads, which it accepts with the secrets filled in', () => {
      expect(Object.keys(configMap.data).filter((name) => !variables.has(name))).toEqual([]);
      const config = loadConfig({
        ...configMap.data,
        DATABASE_URL: 'postgres://acs:secret@db:5432/acs',
        SESSION_SECRET: 'x'.repeat(32),
      });
      expect(config.production).toBe(true);
      expect(config.port).toBe(3000);
    });

    it('documents every Secret key in secret.example.env', () => {
      const keys = readFileSync(path.join(KUBERNETES, 'secret.example.env'), 'utf8')
        .split('\n')
        .filter((line) => /^[A-Z_]+=/.test(line))
        .map((line) => line.split('=')[0]);
      expect(keys.sort()).toEqual(secrets);
    });
  });
});
