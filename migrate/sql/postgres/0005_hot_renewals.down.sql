DROP INDEX IF EXISTS election_leaders_member;
DROP INDEX IF EXISTS election_leaders_free;

ALTER TABLE IF EXISTS election_leaders DROP COLUMN IF EXISTS free_at;
ALTER TABLE IF EXISTS election_leaders DROP COLUMN IF EXISTS member_id;
ALTER TABLE IF EXISTS election_leaders RESET (fillfactor);

ALTER TABLE IF EXISTS election_leaders ADD COLUMN IF NOT EXISTS free_at timestamptz
    GENERATED ALWAYS AS (COALESCE(lease_expires_at, updated_at)) STORED;
CREATE INDEX IF NOT EXISTS election_leaders_free ON election_leaders (free_at);
