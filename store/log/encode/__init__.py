"""Vectorized encoding of a batch of messages (an Arrow table) into commitlog records: the put
path before the append lock.

Two steps, split around the append lock:

1. :func:`rmqlog.log.encode.prepare.prepare_batch` (no lock): validate every row
   (:mod:`.columns`: typed errors naming the row and the field), fill defaults, build the
   properties and the rest of each record's trailer (:mod:`.trailer`), the header's columns
   (:mod:`.header`) and the record lengths. Any bad row raises before a byte is written.
2. Under the lock, :meth:`.batch.EncodedBatch.fill` sets the fields only the lock can give
   (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP); the commitlog then writes the records chunk
   by chunk (:meth:`rmqlog.log.commitlog.CommitLog.append_all`). Per chunk, the UNIQ_KEY
   items are generated and either the C helper packs the records into one buffer, computing
   each body CRC on the way (:meth:`.batch.EncodedBatch.pack`), or, without it, the records
   are joined (:meth:`.batch.EncodedBatch.joined`) or written straight from their pieces
   (:meth:`.batch.EncodedBatch.iovecs`, large bodies), with body CRCs from a background
   thread (:mod:`.crc`). A batch of one chunk is instead packed whole before the lock
   (:meth:`.batch.EncodedBatch.prepack`) and only those three fields are written into it
   under the lock (:meth:`.batch.EncodedBatch.patch`).

The usual small put, a *plain* batch (one topic, bodies only, one write chunk), skips step 1's
general machinery: :func:`.plain.prepare_plain` checks it and one call of the C helper
(``pack_plain``) builds every record, CRCs and UNIQ_KEYs included, byte for byte what the
general path would pack. A put's cost is mostly fixed (Python lines and numpy/Arrow calls,
not bytes); this path cut it from ~280 to ~185 us of CPU for one message.

Modules: :mod:`.prepare` (the entry point), :mod:`.columns` (input validation),
:mod:`.trailer` (properties, topic, their lengths), :mod:`.header` (the fixed-width header),
:mod:`.crc` (body CRCs and write chunks), :mod:`.batch` (the encoded batch and how it is
packed), :mod:`.plain` (the plain path), :mod:`.arrays` (Arrow buffer helpers),
:mod:`.native` (the optional C helper's kernels, in one place).
"""
