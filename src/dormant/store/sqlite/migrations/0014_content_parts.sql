-- schema 13 -> 14: content parts. An input and a message keep their images and files as
-- JSON references to content-addressed blobs plus their facts (media type, size, width,
-- height, name, text); NULL: none. The bytes are blobs (blobs, blob_chunks, blob_refs).
ALTER TABLE inputs ADD COLUMN parts TEXT;
ALTER TABLE messages ADD COLUMN parts TEXT;
