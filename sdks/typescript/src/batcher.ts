/**
 * Calls of one kind gathered while one is in flight (as composer_common.batching): the
 * first item goes at once; what the tasks ask while `maxInFlight` calls are out waits and
 * goes together in the next call, at most `maxSize` items. Each item gets its own answer,
 * or its own error.
 */

type Settle<R> = { resolve: (value: R) => void; reject: (reason: unknown) => void };

export class Batcher<T, R> {
  private readonly waiting: Array<{ item: T } & Settle<R>> = [];
  private inFlight = 0;

  /** `send` answers every item, in order: a value, or an Error for that item alone. */
  constructor(
    private readonly send: (items: T[]) => Promise<Array<R | Error>>,
    private readonly maxSize = 128,
    private readonly maxInFlight = 2,
  ) {}

  submit(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      this.flush();
    });
  }

  private flush(): void {
    while (this.inFlight < this.maxInFlight && this.waiting.length > 0) {
      const batch = this.waiting.splice(0, this.maxSize);
      this.inFlight += 1;
      this.send(batch.map((b) => b.item))
        .then(
          (answers) => {
            batch.forEach((b, i) => {
              const answer = answers[i];
              if (answer === undefined) {
                b.reject(new Error(`${answers.length} answers for ${batch.length} items`));
              } else if (answer instanceof Error) {
                b.reject(answer);
              } else {
                b.resolve(answer);
              }
            });
          },
          (error: unknown) => batch.forEach((b) => b.reject(error)),
        )
        .finally(() => {
          this.inFlight -= 1;
          this.flush();
        });
    }
  }
}
