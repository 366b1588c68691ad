// Package badname holds the test that every entry point of every package
// that takes a name refuses the same invalid names the same way: an error
// that wraps layout.ErrBadName, and the segment's file unchanged. It has
// no code of its own. (Packages txn and coro take no names: a transaction
// space is one per segment, and coro wraps locks opened by the others.)
package badname
