// Package dynamotest is an in-memory fake of AWS DynamoDB that speaks the real wire protocol (JSON 1.0
// over HTTP, X-Amz-Target: DynamoDB_20120810.<Operation>), so tests run the production AWS SDK code —
// request signing, serialisation, error decoding, paging — without an AWS account.
//
// It serves what a reader of a table needs: Scan, Query (an equality on the table's hash key, or on
// the hash key of a global secondary index with a range key to sort by) and GetItem, with
// LastEvaluatedKey paging and DynamoDB's 1 MB page cap. Items are kept in their wire form
// ({"id": {"S": "..."}}) and seeded with Put, so a test writes exactly the layout a real writer
// (Confidant's PynamoDB models) leaves. It refuses every write operation over the wire: what reads
// through it can prove it never writes (Writes counts the attempts).
package dynamotest

import (
	"encoding/json"
	"hash/crc32"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gantry-dev/gantry/pkg/awstest"
)

const (
	targetPrefix = "DynamoDB_20120810."
	// maxPageBytes is DynamoDB's cap on the data one Scan or Query page reads.
	maxPageBytes = 1 << 20
)

// writeOperations are DynamoDB's operations that change data; the fake refuses them all.
var writeOperations = []string{"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems", "CreateTable", "DeleteTable", "UpdateTable"}

// Item is one item in DynamoDB's wire form: attribute name → {"S": ...} / {"N": ...} / ...
type Item = map[string]map[string]any

// Index is a global secondary index: items are found by Hash and sorted by Range.
type Index struct {
	Hash, Range string
}

// Server is a running fake DynamoDB endpoint. Its methods are safe for concurrent use.
type Server struct {
	srv                  *httptest.Server
	*awstest.JSONService // dispatch, FailNext and Requests

	mu     sync.Mutex
	tables map[string]*table
	// pageLimit, when > 0, caps the items of every page (on top of the client's Limit), so tests page.
	pageLimit int
}

type table struct {
	hashKey string
	indexes map[string]Index
	items   map[string]Item // by hash key value
	sorted  []Item          // items by hash key, for Scan; nil after a change
}

// NewServer starts a fake with no tables. Close it when done.
func NewServer() *Server {
	s := &Server{tables: map[string]*table{}}
	ops := map[string]awstest.Operation{
		"Scan":    s.scan,
		"Query":   s.query,
		"GetItem": s.getItem,
	}
	for _, op := range writeOperations {
		ops[op] = func([]byte) (any, *awstest.Error) {
			return nil, awstest.NewError(http.StatusForbidden, "AccessDeniedException", "dynamotest: %s refused: this fake is read-only", op)
		}
	}
	s.JSONService = awstest.NewJSON10Service(&s.mu, targetPrefix, ops)
	s.JSONService.RequireSigV4("dynamodb")
	s.srv = httptest.NewServer(withCRC32(s.JSONService))
	return s
}

// withCRC32 sets X-Amz-Crc32, the CRC32 (IEEE) of the response body, as DynamoDB does on every
// response: the SDK checks the body against it, and warns on every response that lacks it.
func withCRC32(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		maps.Copy(w.Header(), rec.Header())
		body := rec.Body.Bytes()
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
}

// URL is the endpoint to give the SDK (BaseEndpoint), or Confidant's DYNAMODB_URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// CreateTable adds an empty table whose items are keyed by the string attribute hashKey, with global
// secondary indexes by name.
func (s *Server) CreateTable(name, hashKey string, indexes map[string]Index) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables[name] = &table{hashKey: hashKey, indexes: indexes, items: map[string]Item{}}
}

// Put stores (or replaces) an item. It panics on a missing table or hash key: a mistake in the test.
func (s *Server) Put(tableName string, item Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tables[tableName]
	key, ok := stringAttr(item, t.hashKey)
	if !ok {
		panic("dynamotest: item without string hash key " + t.hashKey)
	}
	t.items[key] = item
	t.sorted = nil
}

// Delete removes an item (a test simulating a change on the live table).
func (s *Server) Delete(tableName, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tables[tableName].items, key)
	s.tables[tableName].sorted = nil
}

// Get returns a copy of an item (nil when absent).
func (s *Server) Get(tableName, key string) Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.tables[tableName].items[key]
	if !ok {
		return nil
	}
	out := Item{}
	for k, v := range it {
		out[k] = v
	}
	return out
}

// Keys returns the hash keys of a table's items, sorted.
func (s *Server) Keys(tableName string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.tables[tableName].items))
	for k := range s.tables[tableName].items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Edit changes an item in place (a test damaging or changing the live table).
func (s *Server) Edit(tableName, key string, edit func(Item)) {
	it := s.Get(tableName, key)
	if it == nil {
		panic("dynamotest: no item " + key)
	}
	edit(it)
	s.Put(tableName, it)
}

// SetPageLimit caps every Scan and Query page at n items (0: only DynamoDB's own 1 MB cap).
func (s *Server) SetPageLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageLimit = n
}

// Writes counts the write operations received (all refused).
func (s *Server) Writes() int {
	n := 0
	for _, op := range writeOperations {
		n += s.Requests(op)
	}
	return n
}

func stringAttr(item Item, name string) (string, bool) {
	v, ok := item[name]["S"].(string)
	return v, ok
}

// sortValue is an attribute's value for ordering: strings as they are (Confidant's dates sort as
// text), numbers by their text (good enough for a fake: the indexes here sort by dates).
func sortValue(item Item, name string) string {
	for _, t := range []string{"S", "N"} {
		if v, ok := item[name][t].(string); ok {
			return v
		}
	}
	return ""
}

func (s *Server) table(name string) (*table, *awstest.Error) {
	t, ok := s.tables[name]
	if !ok {
		return nil, awstest.ClientError("ResourceNotFoundException", "Requested resource not found: Table: %s not found", name)
	}
	return t, nil
}

type pageRequest struct {
	TableName         string
	IndexName         string
	Limit             int
	ExclusiveStartKey Item
	ConsistentRead    bool
	// Query only.
	KeyConditionExpression    string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues Item
	ScanIndexForward          *bool
	// Scan only: parallel scans are not modelled.
	TotalSegments int
}

type pageResponse struct {
	Items            []Item `json:"Items"`
	Count            int    `json:"Count"`
	ScannedCount     int    `json:"ScannedCount"`
	LastEvaluatedKey Item   `json:"LastEvaluatedKey,omitempty"`
}

// page returns the items after start (a key of the same ordering) within the limits, and the key
// to continue from.
func (s *Server) page(items []Item, sorted bool, keyOf func(Item) Item, less func(a, b Item) int, req pageRequest) pageResponse {
	if !sorted {
		slices.SortFunc(items, less)
	}
	i := 0
	if req.ExclusiveStartKey != nil {
		// The first item after the key: binary search, the items being in key order.
		i = sort.Search(len(items), func(j int) bool { return less(items[j], req.ExclusiveStartKey) > 0 })
	}
	limit := req.Limit
	if s.pageLimit > 0 && (limit == 0 || s.pageLimit < limit) {
		limit = s.pageLimit
	}
	out := pageResponse{Items: []Item{}}
	size := 0
	for ; i < len(items); i++ {
		if limit > 0 && len(out.Items) == limit {
			break
		}
		data, _ := json.Marshal(items[i])
		if size > 0 && size+len(data) > maxPageBytes {
			break
		}
		size += len(data)
		out.Items = append(out.Items, items[i])
	}
	if i < len(items) && len(out.Items) > 0 {
		out.LastEvaluatedKey = keyOf(out.Items[len(out.Items)-1])
	}
	out.Count, out.ScannedCount = len(out.Items), len(out.Items)
	return out
}

func (s *Server) scan(body []byte) (any, *awstest.Error) {
	var req pageRequest
	if err := awstest.Decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	if req.TotalSegments > 1 || req.IndexName != "" {
		return nil, awstest.ClientError("ValidationException", "dynamotest: parallel scans and index scans are not modelled")
	}
	less := func(a, b Item) int { return strings.Compare(sortValue(a, t.hashKey), sortValue(b, t.hashKey)) }
	if t.sorted == nil {
		// Sorted once per change, not per page: a reader pages through 50,000 items in benchmarks.
		t.sorted = make([]Item, 0, len(t.items))
		for _, it := range t.items {
			t.sorted = append(t.sorted, it)
		}
		slices.SortFunc(t.sorted, less)
	}
	keyOf := func(it Item) Item { return Item{t.hashKey: it[t.hashKey]} }
	return s.page(t.sorted, true, keyOf, less, req), nil
}

// keyCondition accepts "name = :value" (names may be #placeholders).
var keyCondition = regexp.MustCompile(`^\s*(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)\s*$`)

func (s *Server) query(body []byte) (any, *awstest.Error) {
	var req pageRequest
	if err := awstest.Decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	m := keyCondition.FindStringSubmatch(req.KeyConditionExpression)
	if m == nil {
		return nil, awstest.ClientError("ValidationException", "dynamotest: only KeyConditionExpression \"name = :value\" is modelled")
	}
	name := m[1]
	if strings.HasPrefix(name, "#") {
		name = req.ExpressionAttributeNames[name]
	}
	want, ok := req.ExpressionAttributeValues[m[2]]["S"].(string)
	if !ok {
		return nil, awstest.ClientError("ValidationException", "Value provided in ExpressionAttributeValues unused in expressions or not a string: %s", m[2])
	}
	index := Index{Hash: t.hashKey}
	if req.IndexName != "" {
		if index, ok = t.indexes[req.IndexName]; !ok {
			return nil, awstest.ClientError("ValidationException", "The table does not have the specified index: %s", req.IndexName)
		}
	}
	if name != index.Hash {
		return nil, awstest.ClientError("ValidationException", "Query condition missed key schema element: %s", index.Hash)
	}
	var items []Item
	for _, it := range t.items {
		if v, ok := stringAttr(it, index.Hash); ok && v == want {
			items = append(items, it)
		}
	}
	forward := req.ScanIndexForward == nil || *req.ScanIndexForward
	less := func(a, b Item) int {
		c := 0
		if index.Range != "" {
			c = strings.Compare(sortValue(a, index.Range), sortValue(b, index.Range))
		}
		if c == 0 {
			c = strings.Compare(sortValue(a, t.hashKey), sortValue(b, t.hashKey))
		}
		if !forward {
			c = -c
		}
		return c
	}
	keyOf := func(it Item) Item {
		key := Item{t.hashKey: it[t.hashKey], index.Hash: it[index.Hash]}
		if index.Range != "" {
			key[index.Range] = it[index.Range]
		}
		return key
	}
	return s.page(items, false, keyOf, less, req), nil
}

func (s *Server) getItem(body []byte) (any, *awstest.Error) {
	var req struct {
		TableName      string
		Key            Item
		ConsistentRead bool
	}
	if err := awstest.Decode(body, &req); err != nil {
		return nil, err
	}
	t, err := s.table(req.TableName)
	if err != nil {
		return nil, err
	}
	key, ok := stringAttr(req.Key, t.hashKey)
	if !ok || len(req.Key) != 1 {
		return nil, awstest.ClientError("ValidationException", "The provided key element does not match the schema")
	}
	if it, ok := t.items[key]; ok {
		return map[string]any{"Item": it}, nil
	}
	return map[string]any{}, nil
}
