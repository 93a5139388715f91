-- schema 14 -> 15: reserved for a change made on another line of work (replaced at merge).
SELECT 1;
