import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

/** The conversation an anonymous visitor of a widget is having: found again after a reload. */
@Entity({ name: 'widget_conversations' })
export class WidgetConversation {
  @PrimaryColumn({ name: 'widget_id', type: 'uuid' })
  widgetId: string;

  /** The visitor id the widget keeps in the visitor's localStorage (`v_` and 32 hex digits). */
  @PrimaryColumn({ name: 'visitor_id', type: 'text' })
  visitorId: string;

  @Column({ name: 'conversation_id', type: 'uuid' })
  conversationId: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
