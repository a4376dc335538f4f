/**
 * One connection opened as libpq's sslmode opens it: the plugin SDK's, shared
 * with the Iceberg writer's JDBC catalog. @ref LLP 0064, LLP 0077
 */
export { type PgClientOptions as ClientOptions, openPgClient as openClient, type PgTransport as Transport } from 'hypsink/plugin';
