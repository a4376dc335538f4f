/** Every figure group, in DESIGN §10 order. */
import type { FigureGroup } from '../lib/figure.js';
import { aggregatorGroup } from './aggregator.js';
import { coldStart } from './cold-start.js';
import { digestCost } from './digest.js';
import { forwardVsRaw } from './forward-vs-raw.js';
import { icebergGroup } from './iceberg.js';
import { ingest } from './ingest.js';
import { localFsVsRaw } from './localfs-vs-raw.js';
import { naiveVsIncremental } from './naive-vs-incremental.js';
import { noNewTick } from './no-new-tick.js';
import { peakRss } from './peak-rss.js';
import { peer } from './peer.js';
import { postgresVsRaw } from './postgres-vs-raw.js';
import { receiverAbuse } from './receiver-abuse.js';
import { scrapeDuringExport } from './scrape-during-export.js';
import { tickBigVsSmall } from './tick-big-vs-small.js';
import { transformsExport } from './transforms-export.js';

export const GROUPS: readonly FigureGroup[] = [tickBigVsSmall, noNewTick, peer, localFsVsRaw, forwardVsRaw, postgresVsRaw, transformsExport, digestCost, icebergGroup, ingest, peakRss, naiveVsIncremental, coldStart, receiverAbuse, scrapeDuringExport, aggregatorGroup];
