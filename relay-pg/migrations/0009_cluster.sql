-- Version 9: a cluster of relay nodes, each owning some of the deployment's shards.
--
-- `cluster` has one row once a node created the cluster on this schema: how many shards the
-- deployment has (fixed for its life: users are hashed into them). A schema is served either by
-- one active relay (`leader`, migration 0002) or by a cluster, never both: creating the cluster
-- takes the leader epoch from 0 to 1 (refused when a leader ever took it), and a campaign
-- refuses a schema with a cluster row.
--
-- `nodes`: one row per node name; its lease runs until `lease_until` (the database's clock, so
-- node clocks do not matter). A node renews only a lease that has not lapsed; a lapsed node has
-- lost every shard and comes back as a new incarnation.
--
-- `shards`: who owns each shard (a node name and incarnation, or nobody) under which epoch. Every
-- change of owner takes the next epoch; every commit for a shard calls relay_fence_shard(shard,
-- its epoch) first. A planned move marks the shard for `handover_to` until `handover_due`: the
-- owner stops the shard and hands it over itself, or the move is forced at the deadline.

CREATE TABLE cluster (
    id      SMALLINT PRIMARY KEY CHECK (id = 1),
    shards  INTEGER NOT NULL CHECK (shards BETWEEN 1 AND 65535),
    created TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
    name        TEXT PRIMARY KEY,
    incarnation BIGINT NOT NULL CHECK (incarnation >= 1),
    address     TEXT NOT NULL DEFAULT '',
    lease_until TIMESTAMPTZ NOT NULL,
    joined      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE shards (
    id                INTEGER PRIMARY KEY CHECK (id >= 0),
    epoch             BIGINT NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    owner             TEXT,
    owner_incarnation BIGINT,
    handover_to       TEXT,
    handover_due      TIMESTAMPTZ,
    moves             BIGINT NOT NULL DEFAULT 0,
    since             TIMESTAMPTZ,
    CHECK ((owner IS NULL) = (owner_incarnation IS NULL)),
    CHECK ((handover_to IS NULL) = (handover_due IS NULL))
);

CREATE INDEX shards_owner ON shards (owner, owner_incarnation);

-- Raises SQLSTATE RF001 unless `expected` is the current epoch of `shard`; holds a share lock on
-- the shard's row until the end of the calling transaction, so each commit of epoch E either
-- completes before the move to E+1 (and the new owner's reads see it) or sees E+1 and aborts.
CREATE FUNCTION relay_fence_shard(shard INTEGER, expected BIGINT) RETURNS VOID
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fence$
DECLARE
    current_epoch BIGINT;
BEGIN
    SELECT epoch INTO current_epoch FROM shards WHERE id = shard FOR SHARE;
    IF current_epoch IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'relay fenced: shard % epoch % is not the current epoch %',
            shard, expected, current_epoch
            USING ERRCODE = 'RF001';
    END IF;
END
$fence$;
