// Package named indexes and orders lists of objects by their names, as a config apply
// compares a document's objects with the stored ones.
package named

import (
	"slices"
	"strings"
)

// Index maps the objects of list by their names.
func Index[T any](list []*T, name func(*T) string) map[string]*T {
	m := make(map[string]*T, len(list))
	for _, v := range list {
		m[name(v)] = v
	}
	return m
}

// Sorted lists the indices of list's objects in the order of their names, each
// with its name, so a plan reads in the order export writes while errors keep the
// document's own indices.
func Sorted[T any](list []*T, name func(*T) string) func(yield func(int, string) bool) {
	idx := make([]int, len(list))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(name(list[a]), name(list[b])) })
	return func(yield func(int, string) bool) {
		for _, i := range idx {
			if !yield(i, name(list[i])) {
				return
			}
		}
	}
}

// AppendNew appends to have the objects of want whose names it lacks.
func AppendNew[T any](have, want []*T, name func(*T) string) []*T {
	known := Index(have, name)
	out := slices.Clip(have)
	for _, w := range want {
		if known[name(w)] == nil {
			out = append(out, w)
		}
	}
	return out
}
