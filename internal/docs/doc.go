// Package docs holds the test that keeps the README and the package docs
// free of references that mean nothing to a user: the numbers of our
// internal design documents, the files they live in, and the history of
// their making. It has no code of its own.
package docs
