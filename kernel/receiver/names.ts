/**
 * The receiver's data files are named by hypsink's one name rule (injective even
 * where the filesystem folds case, safe on Windows). Each ledger entry records
 * its file, so files named under the first rule keep being read as they are.
 * @ref LLP 0029 (one name rule)
 */
import { encodeSegment } from '../store/segments.js';

export { encodeSegment };

/** The data file of a partition, relative to the data dir (always '/'-separated). */
export function dataFileFor(dataset: string, source: string): string {
  return `${encodeSegment(dataset)}/source=${encodeSegment(source)}.ndjson`;
}
