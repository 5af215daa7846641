// Package confidant imports a Lyft Confidant installation's data into gantry (`gantry import
// confidant`): it reads Confidant's DynamoDB table as Confidant's PynamoDB models wrote it
// (confidant/models: credential.py, service.py, blind_credential.py), decrypts every revision's pairs
// as Confidant does (KMS Decrypt of the data key with the encryption context {"id": <credential id>},
// then Fernet), and writes each revision with its id, revision number, names, dates and mappings
// through the secrets domain's Importer, which seals the pairs into gantry's barrier.
//
// The layout it reads: one table (DYNAMODB_TABLE, hash key id, global secondary index
// data_type_date_index on data_type and modified_date). A credential is a current item (id = a
// 32-hex-digit uuid, data_type "credential") and one "archive-credential" item per revision, id
// "<id>-<revision>", the current revision included; services likewise ("service",
// "archive-service", whose ids may themselves contain "-"). Blind credentials ("blind-credential",
// "archive-blind-credential") hold pairs their clients encrypted under their own KMS keys: they are
// reported one by one and not imported (see Report).
//
// With DYNAMODB_TABLE_ARCHIVE (Options.ArchiveTable), the credentials Confidant's archive script
// moved to that table (its current item and every revision, each with an archive_date) are imported
// as well, with their history, before the services, whose history may name them; then they move
// into gantry's archive area (Importer.ArchiveCredential) stamped with Confidant's archive_date.
//
// The layout is checked against the real Confidant: testdata holds the DynamoDB writes Confidant
// 7.0.0's own code made (testdata/README.md), which confidanttest.LoadCaptured replays.
//
// The import only ever calls DynamoDB's Scan and KMS's Decrypt: Confidant's side is read-only. It is
// idempotent and resumable — each revision is written with compare-and-set on the previous one, and a
// run starts each record after the last revision gantry holds. Every run puts back the service
// mappings an earlier one had to leave out (Importer.ReplaceServiceRevision: a later
// DYNAMODB_TABLE_ARCHIVE, an item repaired in Confidant's table), and ends by reading every revision
// gantry holds of Confidant's records back and comparing it with Confidant's.
package confidant
