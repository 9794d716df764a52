-- V013: a webhook's delivery id is random, kept with its outbox row.
--
-- Composer-Delivery was the outbox row's id: a sequential number that told a
-- receiver (and whoever saw one delivery) how many webhooks the system sent and
-- what the next ids would be, and it was not part of the signature, so a replay
-- of a signed delivery with another Composer-Delivery got past a receiver that
-- dedupes on it. Each webhook row now has a random UUID made when it is enqueued,
-- the same on every retry of that delivery, and the signature covers it
-- (docs/architecture.md §6, "Webhooks"). Dispatch rows need none.
ALTER TABLE outbox ADD COLUMN delivery_id UUID;

-- Webhooks waiting when this runs get theirs now: they go out under the new id.
UPDATE outbox SET delivery_id = gen_random_uuid() WHERE kind = 'webhook';

ALTER TABLE outbox ADD CONSTRAINT outbox_webhook_delivery_id
    CHECK (kind <> 'webhook' OR delivery_id IS NOT NULL);
