-- V005: a lease is bound to the server's token, not to a name anyone can read.
--
-- Until now a worker proved it held a lease by naming its owner, and the owner
-- is the worker's consumer name in Redis (XINFO CONSUMERS shows it): anyone who
-- could read Redis could renew another worker's lease and report its task.
-- The coordinator now issues an unguessable token with each grant (lease_token)
-- and renewals and reports must present it. lease_claim is the worker's own
-- random name for one lease request: a request sent again after its answer was
-- lost (the same claim) gets the same lease and token back instead of a refusal.
-- Neither is ever shown by the API.
ALTER TABLE task_instances ADD COLUMN lease_token TEXT;
ALTER TABLE task_instances ADD COLUMN lease_claim TEXT;
