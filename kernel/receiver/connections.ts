/**
 * The receiver's connections: a budget only a token earns.
 *
 * A connection is authenticated once a request on it carried a valid token;
 * until then it is one anybody who can reach the port could have opened. When
 * a new connection finds its address at its cap, the unauthenticated share
 * (the cap less the reserve) full, or the cap full, another gives way: the
 * oldest unauthenticated one (of the address holding the most, for the shares
 * over all addresses), else the authenticated one idle longest. A busy
 * authenticated connection never gives way; when nothing can, the new one is
 * closed at once.
 * @ref LLP 0065
 */
import type { Socket } from 'node:net';

export interface ConnectionLimits {
  /** Open connections at most. */
  readonly max: number;
  /** Of `max`, kept for authenticated connections (< max). */
  readonly reserved: number;
  /** Open connections at most from one remote address. */
  readonly perAddress: number;
}

interface Conn {
  readonly socket: Socket;
  readonly address: string;
  authenticated: boolean;
  /** Requests on it not answered in full yet. */
  busy: number;
  /** When it connected or last finished an answer. */
  lastActive: number;
}

interface AddressState {
  /** Oldest first. */
  readonly conns: Set<Conn>;
  unauthenticated: number;
}

/** An IPv4 peer of a dual-stack socket is the same address as over IPv4. */
function addressOf(socket: Socket): string | null {
  const a = socket.remoteAddress;
  if (a === undefined) return null;
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}

function oldestUnauthenticated(conns: Iterable<Conn>): Conn | undefined {
  for (const c of conns) if (!c.authenticated) return c;
  return undefined;
}

function idlestAuthenticated(conns: Iterable<Conn>): Conn | undefined {
  let best: Conn | undefined;
  for (const c of conns) {
    if (c.authenticated && c.busy === 0 && (best === undefined || c.lastActive < best.lastActive)) best = c;
  }
  return best;
}

export class ConnectionBudget {
  private readonly all = new Map<Socket, Conn>();
  /** Oldest first. */
  private readonly unauthenticated = new Set<Conn>();
  private readonly byAddress = new Map<string, AddressState>();
  /** Connections closed to make room, and new ones refused because nothing could. */
  shed = 0;

  constructor(private readonly limits: ConnectionLimits) {}

  get size(): number {
    return this.all.size;
  }

  /** Take a new connection in, closing others to make room; closes it at once when none can give way. */
  admit(socket: Socket): void {
    const address = addressOf(socket);
    if (address === null || !this.makeRoom(address)) {
      this.shed++;
      socket.destroy();
      return;
    }
    const c: Conn = { socket, address, authenticated: false, busy: 0, lastActive: performance.now() };
    this.all.set(socket, c);
    this.unauthenticated.add(c);
    let state = this.byAddress.get(address);
    if (state === undefined) {
      state = { conns: new Set(), unauthenticated: 0 };
      this.byAddress.set(address, state);
    }
    state.conns.add(c);
    state.unauthenticated++;
    socket.once('close', () => this.forget(c));
  }

  /** A request on this socket carried a valid token. */
  authenticated(socket: Socket): void {
    const c = this.all.get(socket);
    if (c === undefined || c.authenticated) return;
    c.authenticated = true;
    this.unauthenticated.delete(c);
    this.byAddress.get(c.address)!.unauthenticated--;
  }

  isAuthenticated(socket: Socket): boolean {
    return this.all.get(socket)?.authenticated === true;
  }

  /** A request started on this socket; call the returned function once it is answered (or cut). */
  busy(socket: Socket): () => void {
    const c = this.all.get(socket);
    if (c === undefined) return () => {};
    c.busy++;
    return () => {
      c.busy--;
      c.lastActive = performance.now();
    };
  }

  /** Room for one more connection from `address`, made by closing others where needed; false when none can give way. */
  private makeRoom(address: string): boolean {
    const here = this.byAddress.get(address);
    if (here !== undefined && here.conns.size >= this.limits.perAddress) {
      if (!this.giveWay(oldestUnauthenticated(here.conns) ?? idlestAuthenticated(here.conns))) return false;
    }
    // Never empty here: the unauthenticated share is at least one connection.
    if (this.unauthenticated.size >= this.limits.max - this.limits.reserved && !this.giveWay(this.unauthenticatedVictim())) return false;
    if (this.all.size >= this.limits.max) return this.giveWay(this.unauthenticatedVictim() ?? idlestAuthenticated(this.all.values()));
    return true;
  }

  /** The oldest unauthenticated connection of the address holding the most: one address's flood displaces itself first. */
  private unauthenticatedVictim(): Conn | undefined {
    let most: AddressState | undefined;
    for (const s of this.byAddress.values()) {
      if (s.unauthenticated > 0 && (most === undefined || s.unauthenticated > most.unauthenticated)) most = s;
    }
    return most === undefined ? undefined : oldestUnauthenticated(most.conns);
  }

  private giveWay(c: Conn | undefined): boolean {
    if (c === undefined) return false;
    this.shed++;
    this.forget(c);
    c.socket.destroy();
    return true;
  }

  private forget(c: Conn): void {
    if (!this.all.delete(c.socket)) return;
    const state = this.byAddress.get(c.address)!;
    state.conns.delete(c);
    if (!c.authenticated) {
      this.unauthenticated.delete(c);
      state.unauthenticated--;
    }
    if (state.conns.size === 0) this.byAddress.delete(c.address);
  }
}
