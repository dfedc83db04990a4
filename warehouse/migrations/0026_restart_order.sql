-- Issue #41 item 1: where the sweep's order put each restart (benchledger/sweep/order.py):
-- restart k of every arm is block k; block_position its place in the block (arm_by_arm:
-- the arm's place in the file); restart_order "blocked" (interleaved, counterbalanced) or
-- "arm_by_arm"; order_seed what the arms' letters were drawn from. NULL on restarts
-- recorded before the order existed (they ran arm by arm).
ALTER TABLE restarts ADD COLUMN block INTEGER;
ALTER TABLE restarts ADD COLUMN block_position INTEGER;
ALTER TABLE restarts ADD COLUMN restart_order VARCHAR;
ALTER TABLE restarts ADD COLUMN order_seed VARCHAR;
