/** Config validation, the plugin's shape, and its import boundary. */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { test } from 'node:test';
import { parseS3Config } from '../../plugins/s3/src/config.js';
import { isHypsinkError } from '../../types/index.js';
import { loadPlugin, makeDestination, manifest } from './helpers.js';

function configError(raw: unknown, sink = 'lake'): string {
  try {
    parseS3Config(raw, sink);
  } catch (e) {
    assert.ok(isHypsinkError(e), String(e));
    assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
    assert.equal(e.exitCode, 2);
    return e.message;
  }
  assert.fail(`config was accepted: ${JSON.stringify(raw)}`);
}

test('the documented sink entry is accepted, with defaults filled in', () => {
  const cfg = parseS3Config(
    { bucket: 'lake', prefix: 'hyp', region: 'us-east-1', endpoint: 'http://127.0.0.1:4569', forcePathStyle: true },
    'lake',
  );
  assert.equal(cfg.bucket, 'lake');
  assert.equal(cfg.prefix, 'hyp');
  assert.equal(cfg.endpoint, 'http://127.0.0.1:4569');
  assert.equal(cfg.forcePathStyle, true);
  assert.equal(cfg.partSize, 8 * 1024 * 1024);
  assert.equal(cfg.createIfAbsent, 'auto');
  assert.deepEqual(cfg.retry, { attempts: 5, baseMs: 200, maxMs: 20_000 });
});

test('only the bucket is required', () => {
  const cfg = parseS3Config({ bucket: 'abc' }, 'x');
  assert.equal(cfg.prefix, '');
  assert.equal(cfg.region, 'us-east-1');
  assert.equal(cfg.endpoint, undefined);
  assert.equal(cfg.forcePathStyle, false);
});

test('a partial retry block keeps the other defaults', () => {
  assert.deepEqual(parseS3Config({ bucket: 'abc', retry: { attempts: 2 } }, 'x').retry, {
    attempts: 2,
    baseMs: 200,
    maxMs: 20_000,
  });
});

test('errors name the sink and the field', () => {
  assert.match(configError({}, 'archive'), /^sink "archive": config\.bucket: /);
  assert.match(configError({ bucket: 'ab' }), /sink "lake": config\.bucket: must be at least 3 characters/);
  assert.match(configError({ bucket: 's3://lake/x' }), /config\.bucket: must be a bucket name/);
  assert.match(configError({ bucket: 'lake', partSize: 0 }), /config\.partSize: /);
  assert.match(configError({ bucket: 'lake', partSize: 1.5 }), /config\.partSize: /);
  assert.match(configError({ bucket: 'lake', endpoint: 'not a url' }), /config\.endpoint: must be an http\(s\) URL/);
  assert.match(configError({ bucket: 'lake', endpoint: 'ftp://x' }), /config\.endpoint: /);
  assert.match(configError({ bucket: 'lake', createIfAbsent: 'maybe' }), /config\.createIfAbsent: /);
  assert.match(configError({ bucket: 'lake', retry: { attempts: 0 } }), /config\.retry\.attempts: /);
  assert.match(configError({ bucket: 'lake', forcePathStyle: 'yes' }), /config\.forcePathStyle: /);
  assert.match(configError({ bucket: 'lake', bukcet: 'lake' }), /config\.bukcet: unknown field/);
  assert.match(configError('lake'), /sink "lake": config: /);
});

test('an endpoint carrying credentials is refused, and the message does not repeat them', () => {
  const msg = configError({ bucket: 'lake', endpoint: 'http://AKIDX:topsecret99@127.0.0.1:9000' });
  assert.match(msg, /config\.endpoint: must not carry credentials/);
  assert.ok(!msg.includes('topsecret99'));
});

test('every bad field is reported at once', () => {
  const msg = configError({ bucket: 'x', region: '', partSize: -1 });
  assert.match(msg, /config\.bucket/);
  assert.match(msg, /config\.region/);
  assert.match(msg, /config\.partSize/);
});

test('the factory validates too, naming the sink from the build context', () => {
  assert.throws(
    () => makeDestination({ prefix: 'p' }, { sink: 'cold-archive' }),
    (e: unknown) => isHypsinkError(e) && e.code === 'HYPSINK_ERR_CONFIG' && /^sink "cold-archive": config\.bucket/.test(e.message),
  );
});

test('plugin.json and activate(): one destination named after the manifest', () => {
  assert.deepEqual(manifest, {
    name: '@hypsink/s3',
    version: '0.1.0',
    apiVersion: '1.0.0',
    provides: ['destination'],
  });
  assert.equal(loadPlugin().name, '@hypsink/s3');
});

test('the plugin imports only from types/ and npm packages, never kernel/', () => {
  const dir = new URL('../../plugins/s3/src/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.endsWith('.ts'));
  assert.ok(files.length >= 4);
  for (const f of files) {
    const src = readFileSync(new URL(f, dir), 'utf8');
    for (const m of src.matchAll(/from\s+'([^']+)'/g)) {
      const spec = m[1]!;
      const ok = spec.startsWith('./') || spec === '../../../types/index.js' || !spec.startsWith('.');
      assert.ok(ok, `${f} imports ${spec}`);
      assert.ok(!spec.includes('kernel'), `${f} imports ${spec}`);
    }
  }
});
