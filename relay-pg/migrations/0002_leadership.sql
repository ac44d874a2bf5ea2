-- Version 2: leadership epoch (fencing token) and the fence every commit runs.
--
-- One row. Every new leader increments `epoch` (after taking the session advisory lock) and only
-- then loads the state. Every commit calls relay_fence(its epoch) first, inside its transaction:
-- the FOR SHARE row lock conflicts with the successor's UPDATE, so each commit of epoch E either
-- completes before the increment to E+1 (and the successor's load sees it) or sees E+1 and aborts.

CREATE TABLE leader (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    epoch       BIGINT NOT NULL CHECK (epoch >= 0),
    holder      TEXT NOT NULL DEFAULT '',
    backend_pid INTEGER,
    since       TIMESTAMPTZ
);

INSERT INTO leader (id, epoch) VALUES (1, 0);

-- Raises SQLSTATE RF001 unless `expected` is the current epoch; holds a share lock on the leader
-- row until the end of the calling transaction. Resolves `leader` in the schema it was created in,
-- whatever the caller's search_path.
CREATE FUNCTION relay_fence(expected BIGINT) RETURNS VOID
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fence$
DECLARE
    current_epoch BIGINT;
BEGIN
    SELECT epoch INTO current_epoch FROM leader WHERE id = 1 FOR SHARE;
    IF current_epoch IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'relay fenced: epoch % is not the current epoch %', expected, current_epoch
            USING ERRCODE = 'RF001';
    END IF;
END
$fence$;
