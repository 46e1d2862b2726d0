-- A Group's renewals become heap-only (HOT) updates: no index covers a
-- column a Group's renewal changes. The seat's holder, when it is a Group
-- whose rounds renew the lease, is marked in member_id (its member row);
-- free_at is then NULL, since the seat lapses when the member row does,
-- and is found through it. Seats held otherwise (an Elector, or a Group
-- that stopped renewing them), and vacant seats, keep free_at: the
-- lease's end, or the last change when that is later (a vacate, a Group
-- letting the seat go).
ALTER TABLE election_leaders ADD COLUMN IF NOT EXISTS member_id uuid;

DROP INDEX IF EXISTS election_leaders_free;
ALTER TABLE election_leaders DROP COLUMN IF EXISTS free_at;

-- Room on each page for the next version of a row, so that a renewal
-- stays on its page from the first.
ALTER TABLE election_leaders SET (fillfactor = 80);

ALTER TABLE election_leaders ADD COLUMN free_at timestamptz
    GENERATED ALWAYS AS (CASE WHEN member_id = leader_id THEN NULL ELSE GREATEST(lease_expires_at, updated_at) END) STORED;

CREATE INDEX IF NOT EXISTS election_leaders_free ON election_leaders (free_at);
CREATE INDEX IF NOT EXISTS election_leaders_member ON election_leaders (member_id) WHERE member_id IS NOT NULL;
